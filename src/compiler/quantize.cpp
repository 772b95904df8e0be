#include "compiler/quantize.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>

#include "compiler/calibration.hpp"
#include "compiler/observe_values.hpp"
#include "compiler/quantize_int4.hpp"
#include "compiler/quantize_lstm.hpp"
#include "compiler/task_metric.hpp"
#include "core/error.hpp"
#include "onnx/onnx_io.hpp"

#include <onnx/onnx-ml.pb.h>

namespace kiln::compiler {
namespace {

constexpr int kMinOpset = 13;  // per-axis DequantizeLinear

// A node to quantize: its activation input (slot 0), its constant weight (slot 1) and the axis
// of the weight's output channels.
struct Target {
  ir::Node* node;
  int64_t weight_axis;
  std::string display;  // the node's name, or "Conv #2" (the third Conv) where it has none
};

bool is_float32_tensor(const ir::Value* v) {
  return v && v->type().is_tensor() && v->type().dtype == DataType::Float32;
}

// The nodes to quantize, less those `excluded` names (by Target::display, which counts every
// candidate of an op type, excluded or not, so that names stay the same across calls). Those
// the INT4 rewrite cannot take are added to `refused` (with the reason) when it is given.
std::vector<Target> find_targets(const ir::Graph& g, const QuantizeOptions& o,
                                 const std::set<std::string>& excluded,
                                 std::vector<std::string>* refused = nullptr) {
  const std::set<std::string> ops(o.op_types.begin(), o.op_types.end());
  std::vector<Target> out;
  std::map<std::string, int> seen;
  for (ir::Node* n : g.nodes()) {
    if (!n->domain().empty() || !ops.count(n->op_type())) continue;
    if (n->inputs().size() < 2) continue;
    const ir::Value* x = n->input(0);
    const ir::Value* w = n->input(1);
    if (!is_float32_tensor(x) || x->is_constant() || !w || !w->is_constant() ||
        w->constant().dtype() != DataType::Float32) {
      continue;
    }
    const size_t rank = w->constant().dims().size();
    const std::string& op = n->op_type();
    int64_t axis = -1;
    if (op == "LSTM") {
      // Only the dynamic form has an 8-bit LSTM (com.microsoft DynamicQuantizeLSTM).
      const int index = seen[op]++;
      std::string display = n->name().empty() ? fmt::format("LSTM #{}", index) : n->name();
      if (excluded.count(display)) continue;
      std::string why =
          o.dynamic ? dynamic_lstm_refusal(*n) : "LSTM weights are quantized by --dynamic only";
      if (why.empty()) {
        out.push_back({n, 1, std::move(display)});
      } else if (refused) {
        refused->push_back(fmt::format("{} ({})", display, why));
      }
      continue;
    }
    if (op == "Conv" && rank >= 3 && !o.dynamic && !o.int4) {
      axis = 0;
    } else if (op == "MatMul" && rank == 2) {
      axis = 1;
    } else if (op == "Gemm" && rank == 2) {
      const ir::Attribute* ta = n->attribute("transA");
      if (ta && ta->get<int64_t>("transA") != 0) continue;  // the activation must be A as it is
      const ir::Attribute* tb = n->attribute("transB");
      axis = tb && tb->get<int64_t>("transB") != 0 ? 0 : 1;
    }
    if (axis < 0) continue;
    const int index = seen[op]++;
    std::string display = n->name().empty() ? fmt::format("{} #{}", op, index) : n->name();
    if (o.int4 && !excluded.count(display)) {
      if (std::string why = int4_refusal(*n); !why.empty()) {
        if (refused) refused->push_back(fmt::format("{} ({})", display, why));
        continue;
      }
    }
    if (!excluded.count(display)) out.push_back({n, axis, std::move(display)});
  }
  return out;
}

// The op types of `o.op_types` this mode can quantize (LSTM only in the dynamic one), for
// messages.
std::vector<std::string> mode_op_types(const QuantizeOptions& o) {
  std::vector<std::string> out;
  for (const std::string& op : o.op_types) {
    if (op != "LSTM" || o.dynamic) out.push_back(op);
  }
  return out;
}

struct UInt8Params {
  float scale = 1.f;
  uint8_t zero_point = 0;
};

// Asymmetric uint8 over [lo, hi], widened to hold 0 (so that zero padding is exact).
UInt8Params uint8_params(float lo, float hi) {
  lo = std::min(lo, 0.f);
  hi = std::max(hi, 0.f);
  UInt8Params p;
  const float span = hi - lo;
  p.scale = span > 0 ? span / 255.f : 1.f;
  p.zero_point = static_cast<uint8_t>(std::clamp(std::lround(-lo / p.scale), 0L, 255L));
  return p;
}

// An activation's calibrated range by the chosen method ({0, 0} where no finite value was seen).
std::pair<float, float> activation_range(const CalibrationHistogram& s, const QuantizeOptions& o) {
  auto [lo, hi] = o.method == CalibrationMethod::Percentile ? percentile_range(s, o.percentile)
                  : o.method == CalibrationMethod::Entropy  ? entropy_range(s)
                                                            : minmax_range(s);
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0;
  return {lo, hi};
}

Tensor scalar_float(float v) {
  Tensor t(DataType::Float32, {});
  t.data<float>()[0] = v;
  return t;
}

// Activation X -> QuantizeLinear -> DequantizeLinear, placed before `before`; returns the
// dequantized value.
ir::Value* insert_qdq(ir::Graph& g, ir::Value* x, const UInt8Params& p, const ir::Node* before) {
  const std::string base = x->name();
  ir::Value* scale = g.add_initializer(g.unique_name(base + "_scale"), scalar_float(p.scale));
  Tensor zp_t(DataType::UInt8, {});
  zp_t.data<uint8_t>()[0] = p.zero_point;
  ir::Value* zp = g.add_initializer(g.unique_name(base + "_zero_point"), std::move(zp_t));
  TypeInfo qt = x->type();
  qt.dtype = DataType::UInt8;
  ir::Value* q = g.add_value(g.unique_name(base + "_quantized"), qt);
  ir::Value* dq = g.add_value(g.unique_name(base + "_dequantized"), x->type());
  const int opset = g.opsets().at("");
  g.insert_node_before(before, "QuantizeLinear", "", g.unique_name(base + "_QuantizeLinear"),
                       {x, scale, zp}, {q})
      ->set_opset(opset);
  g.insert_node_before(before, "DequantizeLinear", "", g.unique_name(base + "_DequantizeLinear"),
                       {q, scale, zp}, {dq})
      ->set_opset(opset);
  return dq;
}

// The weight as int8, symmetric, per channel along `axis` (or per tensor), read through a
// DequantizeLinear placed before `before`; returns the dequantized value.
ir::Value* quantize_weight(ir::Graph& g, ir::Value* w, int64_t axis, bool per_channel,
                           const ir::Node* before) {
  const Tensor& t = w->constant();
  const std::vector<int64_t>& dims = t.dims();
  const int64_t channels = per_channel ? dims[static_cast<size_t>(axis)] : 1;
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  const float* src = t.data<float>();
  auto channel_of = [&](int64_t i) { return per_channel ? (i / inner) % channels : 0; };
  std::vector<float> amax(static_cast<size_t>(channels), 0.f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& m = amax[static_cast<size_t>(channel_of(i))];
    m = std::max(m, std::fabs(src[i]));
  }
  Tensor scales(DataType::Float32,
                per_channel ? std::vector<int64_t>{channels} : std::vector<int64_t>{});
  Tensor zps(DataType::Int8, per_channel ? std::vector<int64_t>{channels} : std::vector<int64_t>{});
  for (int64_t c = 0; c < channels; ++c) {
    scales.data<float>()[c] =
        amax[static_cast<size_t>(c)] > 0 ? amax[static_cast<size_t>(c)] / 127.f : 1.f;
    zps.data<int8_t>()[c] = 0;
  }
  Tensor q(DataType::Int8, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float s = scales.data<float>()[channel_of(i)];
    q.data<int8_t>()[i] = static_cast<int8_t>(std::clamp(std::lround(src[i] / s), -127L, 127L));
  }
  const std::string base = w->name();
  ir::Value* wq = g.add_initializer(g.unique_name(base + "_quantized"), std::move(q));
  ir::Value* s = g.add_initializer(g.unique_name(base + "_scale"), std::move(scales));
  ir::Value* z = g.add_initializer(g.unique_name(base + "_zero_point"), std::move(zps));
  ir::Value* dq = g.add_value(g.unique_name(base + "_dequantized"), w->type());
  ir::Node* node = g.insert_node_before(
      before, "DequantizeLinear", "", g.unique_name(base + "_DequantizeLinear"), {wq, s, z}, {dq});
  node->set_opset(g.opsets().at(""));
  if (per_channel) node->set_attribute("axis", ir::Attribute(axis));
  return dq;
}

// Dynamic INT8: x -> DynamicQuantizeLinear -> (uint8 x, its scale, its zero point), computed
// per run from the activation itself; one per value, shared by its quantized readers.
struct DynamicInput {
  ir::Value* q;
  ir::Value* scale;
  ir::Value* zero_point;
};

DynamicInput insert_dynamic_quantize(ir::Graph& g, ir::Value* x, const ir::Node* before) {
  const std::string base = x->name();
  TypeInfo qt = x->type();
  qt.dtype = DataType::UInt8;
  DynamicInput in;
  in.q = g.add_value(g.unique_name(base + "_quantized"), qt);
  in.scale = g.add_value(g.unique_name(base + "_scale"),
                         TypeInfo::tensor(DataType::Float32, Shape(std::vector<Dim>{})));
  in.zero_point = g.add_value(g.unique_name(base + "_zero_point"),
                              TypeInfo::tensor(DataType::UInt8, Shape(std::vector<Dim>{})));
  g.insert_node_before(before, "DynamicQuantizeLinear", "",
                       g.unique_name(base + "_DynamicQuantizeLinear"), {x},
                       {in.q, in.scale, in.zero_point})
      ->set_opset(g.opsets().at(""));
  return in;
}

// A MatMul or Gemm as MatMulInteger of the dynamically quantized activation and the int8 weight
// ([K, N], per column or per tensor, symmetric), the int32 result scaled back to float32 (x's
// scale times the weight's, Gemm's alpha folded in) and Gemm's C (times beta) added. The node is
// replaced; its output keeps its name.
void rewrite_dynamic(ir::Graph& g, const Target& t, const DynamicInput& in, bool per_channel) {
  ir::Node* n = t.node;
  const int opset = g.opsets().at("");
  const bool gemm = n->op_type() == "Gemm";
  auto float_attr = [&](const char* name, float fallback) {
    const ir::Attribute* a = n->attribute(name);
    return a ? a->get<float>(name) : fallback;
  };
  const float alpha = gemm ? float_attr("alpha", 1.f) : 1.f;
  const float beta = gemm ? float_attr("beta", 1.f) : 1.f;
  const bool trans_b = gemm && t.weight_axis == 0;
  const Tensor& w = n->input(1)->constant();
  const int64_t k = trans_b ? w.dims()[1] : w.dims()[0];
  const int64_t cols = trans_b ? w.dims()[0] : w.dims()[1];
  const float* src = w.data<float>();
  auto at = [&](int64_t r, int64_t c) { return trans_b ? src[c * k + r] : src[r * cols + c]; };
  const int64_t channels = per_channel ? cols : 1;
  std::vector<float> amax(static_cast<size_t>(channels), 0.f);
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& m = amax[static_cast<size_t>(per_channel ? c : 0)];
      m = std::max(m, std::fabs(at(r, c)));
    }
  }
  const std::vector<int64_t> vec_dims =
      per_channel ? std::vector<int64_t>{channels} : std::vector<int64_t>{};
  Tensor scales(DataType::Float32, vec_dims), zps(DataType::Int8, vec_dims);
  for (int64_t c = 0; c < channels; ++c) {
    const float m = amax[static_cast<size_t>(c)];
    scales.data<float>()[c] = (m > 0 ? m / 127.f : 1.f);
    zps.data<int8_t>()[c] = 0;
  }
  Tensor q(DataType::Int8, {k, cols});
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float s = scales.data<float>()[per_channel ? c : 0];
      q.data<int8_t>()[r * cols + c] =
          static_cast<int8_t>(std::clamp(std::lround(at(r, c) / s), -127L, 127L));
    }
  }
  // Alpha rides on the weight's scale (after quantizing with the unscaled one).
  for (int64_t c = 0; c < channels; ++c) scales.data<float>()[c] *= alpha;
  const std::string base = n->input(1)->name();
  ir::Value* wq = g.add_initializer(g.unique_name(base + "_quantized"), std::move(q));
  ir::Value* ws = g.add_initializer(g.unique_name(base + "_scale"), std::move(scales));
  ir::Value* wz = g.add_initializer(g.unique_name(base + "_zero_point"), std::move(zps));
  ir::Value* old = n->output(0);
  const std::string name = old->name();
  TypeInfo acc_t = old->type();
  acc_t.dtype = DataType::Int32;
  // Node names from their outputs' (unique) names: ONNX wants node names unique too.
  auto node = [&](const char* op, std::vector<ir::Value*> inputs, ir::Value* out) {
    ir::Node* m = g.insert_node_before(n, op, "", out->name() + "_" + op, std::move(inputs), {out});
    m->set_opset(opset);
    return m;
  };
  ir::Value* acc = g.add_value(g.unique_name(name + "_int32"), acc_t);
  node("MatMulInteger", {in.q, wq, in.zero_point, wz}, acc);
  ir::Value* acc_f = g.add_value(g.unique_name(name + "_float"), old->type());
  node("Cast", {acc}, acc_f)->set_attribute("to", ir::Attribute(int64_t{1}));  // FLOAT
  ir::Value* scale = g.add_value(g.unique_name(name + "_scale"),
                                 TypeInfo::tensor(DataType::Float32, Shape::from_values(vec_dims)));
  node("Mul", {in.scale, ws}, scale);
  ir::Value* y = g.add_value(g.unique_name(name + "_scaled"), old->type());
  node("Mul", {acc_f, scale}, y);
  ir::Value* c = gemm && n->inputs().size() > 2 ? n->input(2) : nullptr;
  if (c) {
    if (beta != 1.f) {
      ir::Value* b = g.add_initializer(g.unique_name(name + "_beta"), scalar_float(beta));
      ir::Value* cb = g.add_value(g.unique_name(name + "_c"), c->type());
      node("Mul", {c, b}, cb);
      c = cb;
    }
    ir::Value* sum = g.add_value(g.unique_name(name + "_sum"), old->type());
    node("Add", {y, c}, sum);
    y = sum;
  }
  g.replace_uses(old, y);
  g.remove_node(n);
  if (y->name() != name) g.rename_value(y, name);
}

// A residual Add of a convolution's result: `add` reads the skip connection in slot `skip`
// and the convolution's result in the other.
struct ResidualAdd {
  ir::Node* add;
  size_t skip;
};

// The residual Adds of `g` whose convolution is one of `targets`. Where both inputs are such
// results (a downsampling block's Add of its last convolution and its downsampling one), the
// skip is the second (torch's `out += identity`).
std::vector<ResidualAdd> residual_adds(const ir::Graph& g, const std::vector<Target>& targets) {
  std::set<const ir::Value*> conv_results;
  for (const Target& t : targets) {
    if (t.node->op_type() == "Conv" && t.node->outputs().size() == 1) {
      conv_results.insert(t.node->output(0));
    }
  }
  std::vector<ResidualAdd> adds;
  for (ir::Node* n : g.nodes()) {
    if (n->op_type() != "Add" || !n->domain().empty() || n->inputs().size() != 2 ||
        !is_float32_tensor(n->input(0)) || !is_float32_tensor(n->input(1))) {
      continue;
    }
    if (conv_results.count(n->input(0))) {
      adds.push_back({n, 1});
    } else if (conv_results.count(n->input(1))) {
      adds.push_back({n, 0});
    }
  }
  return adds;
}

// Residual blocks: the skip connection of a residual Add of a quantized convolution's result is
// read through a QuantizeLinear / DequantizeLinear pair, as onnxruntime's and NNCF's quantizers
// write it: the one the skip has for its other reader where it has one (a ResNet block's input,
// which the block's first convolution reads), else one of its own from its calibrated range
// (`ranges`; a downsampling convolution's result), unless most of its nonzero values would
// quantize to zero (`collapses`). The CPU's int8 convolution then adds the 8-bit residual and
// writes the block's quantized result itself (passes/fuse_conv_residual): no float32 tensor
// between the blocks. `dequantized`: activation name -> its DequantizeLinear's output (grows).
// Returns the Adds changed.
size_t quantize_residuals(ir::Graph& g, const std::vector<Target>& targets,
                          std::map<std::string, ir::Value*>& dequantized,
                          const std::map<std::string, std::pair<float, float>>& ranges,
                          const std::function<bool(const std::string&)>& collapses) {
  size_t changed = 0;
  for (const ResidualAdd& r : residual_adds(g, targets)) {
    ir::Value* skip = r.add->input(r.skip);
    auto known = dequantized.find(skip->name());
    if (known == dequantized.end()) {
      const auto range = ranges.find(skip->name());
      if (range == ranges.end() || collapses(skip->name())) continue;
      const auto [lo, hi] = range->second;
      known =
          dequantized.emplace(skip->name(), insert_qdq(g, skip, uint8_params(lo, hi), r.add)).first;
    }
    r.add->set_input(r.skip, known->second);
    ++changed;
  }
  return changed;
}

// Max poolings of an activation that the targets read quantized read its DequantizeLinear too,
// as onnxruntime's quantizer writes them: the maximum commutes with quantization, so the int8
// path keeps an Inception block's pooling branch in uint8 and the Concat before it keeps one
// reader, its QuantizeLinear, which passes/fuse_quantized_ops moves before the Concat.
// `dequantized`: activation name -> its DequantizeLinear's output. Returns the poolings changed.
size_t quantize_max_pools(ir::Graph& g, const std::map<std::string, ir::Value*>& dequantized) {
  size_t changed = 0;
  for (ir::Node* n : g.nodes()) {
    if (n->op_type() != "MaxPool" || !n->domain().empty() || n->inputs().empty() || !n->input(0) ||
        (n->outputs().size() > 1 && n->output(1))) {
      continue;  // a MaxPool asked for its Indices keeps float32
    }
    const auto it = dequantized.find(n->input(0)->name());
    if (it == dequantized.end() || it->second == n->input(0)) continue;
    n->set_input(0, it->second);
    ++changed;
  }
  return changed;
}

// The float32 weights nothing reads any more (their int8 copies took their place), removed.
void remove_unread(ir::Graph& g, const std::set<ir::Value*>& weights) {
  const auto uses = g.compute_uses();
  for (ir::Value* w : weights) {
    const auto it = uses.find(w);
    if ((it == uses.end() || it->second.empty()) && !g.is_input(w)) g.remove_value(w);
  }
}

std::vector<float> copy_of(const Tensor& t) {
  std::span<const float> v = t.values<float>();
  return {v.begin(), v.end()};
}

// Cosine similarity accumulated over several tensors.
struct Cosine {
  double dot = 0, aa = 0, bb = 0;
  void add(std::span<const float> a, std::span<const float> b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      dot += double(a[i]) * b[i];
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
    }
  }
  double value() const {
    if (aa == 0 && bb == 0) return 1;
    return aa > 0 && bb > 0 ? dot / std::sqrt(aa * bb) : 0;
  }
};

// The calibration cache's keys: the model file's bytes, and the input sets' names, types,
// shapes and bytes (whichever source they came from).
uint64_t file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), ErrorCode::NotFound, "quantize: cannot read '{}'", path);
  uint64_t h = fnv1a("model");
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = fnv1a(std::string_view(buf.data(), static_cast<size_t>(in.gcount())), h);
  }
  return h;
}

uint64_t data_hash(const std::vector<runtime::Feeds>& sets) {
  uint64_t h = fnv1a("data");
  auto number = [&](int64_t v) {
    h = fnv1a(std::string_view(reinterpret_cast<const char*>(&v), sizeof(v)), h);
  };
  number(static_cast<int64_t>(sets.size()));
  for (const runtime::Feeds& set : sets) {
    number(static_cast<int64_t>(set.size()));
    for (const auto& [name, value] : set) {
      number(static_cast<int64_t>(name.size()));
      h = fnv1a(name, h);
      if (!value.is_tensor()) {
        h = fnv1a("(not a tensor)", h);
        continue;
      }
      const Tensor& t = value.tensor();
      number(static_cast<int64_t>(t.dtype()));
      number(static_cast<int64_t>(t.dims().size()));
      for (int64_t d : t.dims()) number(d);
      if (t.dtype() == DataType::String) {
        for (const std::string& str : t.values<std::string>()) {
          number(static_cast<int64_t>(str.size()));
          h = fnv1a(str, h);
        }
      } else {
        h = fnv1a(std::string_view(static_cast<const char*>(t.raw_data()), t.nbytes()), h);
      }
    }
  }
  return h;
}

// Fills `stats` (the activations this run calibrates) from the cache at `path` when it holds
// this model's and data's histograms of all of them; says why not otherwise. A malformed file
// is an error.
bool read_cache(const std::string& path, const CalibrationCache& want,
                std::map<std::string, CalibrationHistogram>& stats,
                const std::function<void(const std::string&)>& say) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) {
    say(fmt::format("quantize: calibration cache {} does not exist yet: calibrating\n", path));
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), ErrorCode::NotFound, "quantize: cannot read the calibration cache '{}'",
             path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const CalibrationCache cache = parse_calibration_cache(bytes, path);
  std::string why;
  if (cache.model_hash != want.model_hash) {
    why = fmt::format("is for another model (hash {:016x}, this one's {:016x})", cache.model_hash,
                      want.model_hash);
  } else if (cache.data_hash != want.data_hash) {
    why = fmt::format("is for other calibration data (hash {:016x}, these sets' {:016x})",
                      cache.data_hash, want.data_hash);
  } else {
    size_t missing = 0;
    for (const auto& [name, h] : stats) missing += !cache.values.count(name);
    if (missing > 0) {
      why = fmt::format("lacks {} of the {} activations this run calibrates (other --ops?)",
                        missing, stats.size());
    }
  }
  if (!why.empty()) {
    say(fmt::format("quantize: calibration cache {} {}: calibrating again and rewriting it\n", path,
                    why));
    return false;
  }
  for (auto& [name, h] : stats) h = cache.values.at(name);
  say(fmt::format(
      "quantize: calibration read from the cache {} ({} activations; the model's calibration "
      "runs skipped)\n",
      path, stats.size()));
  return true;
}

void write_cache(const std::string& path, const CalibrationCache& cache) {
  const std::string bytes = serialize_calibration_cache(cache);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out.good(), ErrorCode::NotFound, "quantize: cannot write the calibration cache '{}'",
               path);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    KILN_CHECK(out.good(), ErrorCode::Internal, "quantize: cannot write the calibration cache '{}'",
               path);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  KILN_CHECK(!ec, ErrorCode::Internal, "quantize: cannot write the calibration cache '{}': {}",
             path, ec.message());
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : std::string("null");
}

void write_sensitivity_report(const std::string& path, const std::string& metric, double reference,
                              double score, double drop,
                              const std::vector<std::pair<std::string, double>>& nodes,
                              bool higher_is_better) {
  std::string j = "{\n";
  j += fmt::format("  \"metric\": {},\n", json_string(metric));
  j += fmt::format("  \"higher_is_better\": {},\n", higher_is_better ? "true" : "false");
  j += "  \"measure\": \"each node quantized alone, every other node float32: the metric's "
       "drop from the float model on the calibration sets (a rise for lower-is-better "
       "metrics)\",\n";
  j += fmt::format("  \"float_score\": {},\n", json_number(reference));
  j += fmt::format("  \"quantized_score\": {},\n", json_number(score));
  j += fmt::format("  \"quantized_drop\": {},\n", json_number(drop));
  j += "  \"nodes\": [";
  for (size_t i = 0; i < nodes.size(); ++i) {
    j += fmt::format("{}\n    {{\"node\": {}, \"drop\": {}}}", i ? "," : "",
                     json_string(nodes[i].first), json_number(nodes[i].second));
  }
  j += "\n  ]\n}\n";
  std::ofstream out(path, std::ios::trunc);
  KILN_CHECK(out.good(), ErrorCode::NotFound, "quantize: cannot write the sensitivity report '{}'",
             path);
  out << j;
}

}  // namespace

QuantizeResult quantize_model(const QuantizeOptions& o) {
  auto say = [&](const std::string& line) {
    if (o.on_report) o.on_report(line);
  };
  KILN_CHECK_ARG(
      o.method != CalibrationMethod::Percentile || (o.percentile > 50 && o.percentile <= 100),
      "--percentile {} must be in (50, 100]", o.percentile);
  KILN_CHECK_ARG(!o.output_path.empty(), "quantize: give the output path (-o)");
  // Refused before any work (a calibration and its gate can take minutes).
  {
    namespace fs = std::filesystem;
    const fs::path out = fs::absolute(o.output_path);
    KILN_CHECK_ARG(fs::is_directory(out.parent_path()),
                   "quantize: cannot write '{}': its directory does not exist", o.output_path);
    KILN_CHECK_ARG(!fs::exists(o.model_path) || !fs::exists(out) ||
                       !fs::equivalent(out, fs::path(o.model_path)),
                   "quantize: the output would overwrite the model '{}': choose another -o",
                   o.model_path);
  }
  KILN_CHECK_ARG(o.fallback_nodes >= 0, "quantize: fallback_nodes {} must be >= 0",
                 o.fallback_nodes);
  KILN_CHECK_ARG(!o.max_drop || *o.max_drop >= 0, "quantize: max_drop {} must be >= 0",
                 o.max_drop.value_or(0));
  KILN_CHECK_ARG(o.metric.kind != MetricKind::Script || o.metric.timeout_seconds > 0,
                 "quantize: the metric script's time limit {} must be > 0",
                 o.metric.timeout_seconds);
  KILN_CHECK_ARG(!(o.int4 && o.dynamic),
                 "quantize: --int4 (weight-only) and --dynamic are two modes: choose one");
  KILN_CHECK_ARG(!o.int4 || (o.block_size >= 16 && o.block_size <= 256 &&
                             (o.block_size & (o.block_size - 1)) == 0),
                 "quantize: --block-size {} must be 16, 32, 64, 128 or 256", o.block_size);
  KILN_CHECK_ARG(o.gptq_damp > 0 && o.gptq_damp <= 1,
                 "quantize: the GPTQ damping {} must be in (0, 1]", o.gptq_damp);
  const std::shared_ptr<ir::Graph> float_graph = onnx_io::import_model_file(o.model_path).graph;
  const auto opset = float_graph->opsets().find("");
  // MatMulNBits is a com.microsoft op: INT4 needs no per-axis DequantizeLinear.
  KILN_CHECK_ARG(o.int4 || (opset != float_graph->opsets().end() && opset->second >= kMinOpset),
                 "quantize: the model imports ai.onnx opset {}; per-channel QDQ needs opset {} or "
                 "later (convert it first, e.g. onnx.version_converter)",
                 opset == float_graph->opsets().end() ? 0 : opset->second, kMinOpset);
  std::set<std::string> excluded(o.exclude_nodes.begin(), o.exclude_nodes.end());
  std::vector<std::string> refused;
  const std::vector<Target> candidates = find_targets(*float_graph, o, excluded, &refused);
  for (const std::string& why : refused) say(fmt::format("quantize: left float32: {}\n", why));
  KILN_CHECK_ARG(!candidates.empty(),
                 "quantize: '{}' has no {} with a constant float32 weight to quantize",
                 o.model_path,
                 o.int4 ? std::string("MatMul / Gemm (2-D weight)")
                        : fmt::format("{}", fmt::join(mode_op_types(o), " / ")));
  const std::vector<runtime::Feeds> sets = input_sets_for(*float_graph, o.calibration);
  const bool calibrate = !o.dynamic && !o.int4;
  KILN_CHECK_ARG(o.calibration_cache.empty() || calibrate,
                 "quantize: --calibration-cache keeps static INT8's calibration; --{} has none",
                 o.int4 ? "int4" : "dynamic");

  // Calibration, once for every attempt: a streaming histogram of every activation a target
  // reads (every candidate's, --exclude-node's too, so that a cache serves any exclusions).
  std::map<std::string, CalibrationHistogram> stats;
  const std::vector<Target> every_candidate = find_targets(*float_graph, o, {});
  for (const Target& t : every_candidate) stats[t.node->input(0)->name()];
  // And the skip connections of residual blocks that quantize_residuals may read quantized.
  const bool residuals = !o.dynamic && !o.int4 && o.quantized_residuals;
  if (residuals) {
    for (const ResidualAdd& r : residual_adds(*float_graph, every_candidate)) {
      stats[r.add->input(r.skip)->name()];
    }
  }
  KILN_CHECK_ARG(o.run_timeout_seconds >= 0, "quantize: the run timeout {} must be >= 0",
                 o.run_timeout_seconds);
  ObserveOptions obs;
  obs.threads = o.threads;
  obs.timeout_seconds = o.run_timeout_seconds;
  // Every run of a model goes through here, so that one past its time limit says which limit.
  auto observe = [&](const std::shared_ptr<ir::Graph>& graph, const std::vector<runtime::Feeds>& on,
                     const ValueObserver& fn) {
    try {
      return observe_float_values(graph, on, obs, fn);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Unavailable || o.run_timeout_seconds <= 0) throw;
      fail(ErrorCode::Unavailable,
           "quantize: a run of the model stopped at the run time limit ({} s, --run-timeout): {}",
           o.run_timeout_seconds, e.message());
    }
  };
  auto observe_pass = [&] {
    auto add = [&](const std::string& name, const Tensor& data) {
      auto it = stats.find(name);
      if (it == stats.end()) return;
      it->second.add(data.values<float>());
    };
    for (const runtime::Feeds& set : sets) {
      for (const auto& [name, value] : set) {
        if (value.is_tensor() && value.tensor().dtype() == DataType::Float32) {
          add(name, value.tensor());
        }
      }
    }
    const std::string skipped =
        observe(float_graph, sets,
                [&](const ir::Value& v, const Tensor& data, size_t) { add(v.name(), data); });
    KILN_CHECK_ARG(skipped.empty(), "quantize: calibration cannot run: {}", skipped);
  };
  bool cached = false;
  if (calibrate) {
    CalibrationCache cache;
    if (!o.calibration_cache.empty()) {
      cache.model_hash = file_hash(o.model_path);
      cache.data_hash = data_hash(sets);
      cached = read_cache(o.calibration_cache, cache, stats, say);
    }
    if (!cached) {
      observe_pass();
      if (!o.calibration_cache.empty()) {
        cache.values = stats;
        write_cache(o.calibration_cache, cache);
        say(fmt::format("quantize: calibration cache written: {} ({} values)\n",
                        o.calibration_cache, stats.size()));
      }
    }
  }
  // Each calibrated activation's range, once: the collapse trap and every build attempt read it
  // (entropy's search is the costly one).
  std::map<std::string, std::pair<float, float>> ranges;
  if (calibrate) {
    for (const auto& [name, h] : stats) ranges[name] = activation_range(h, o);
  }
  // GPTQ: one Gram matrix X^T X per distinct activation the targets read (Q, K and V share
  // theirs), from the float model's activations, within gptq_memory.
  std::map<std::string, std::pair<int64_t, std::vector<double>>> grams;
  if (o.int4 && o.int4_method == Int4Method::Gptq) {
    size_t bytes = 0;
    std::set<std::string> over;
    for (const Target& t : candidates) {
      const std::string& x = t.node->input(0)->name();
      const int64_t k = int4_weight_rows(*t.node);
      const size_t need = static_cast<size_t>(k) * static_cast<size_t>(k) * sizeof(double);
      if (grams.count(x) || over.count(x)) continue;
      if (bytes + need > o.gptq_memory) {
        over.insert(x);
        say(
            fmt::format("quantize: {}: its {} x {} Gram matrix is past the GPTQ memory limit "
                        "({} MiB): RTN\n",
                        t.display, k, k, o.gptq_memory >> 20));
        continue;
      }
      bytes += need;
      grams[x] = {k, std::vector<double>(static_cast<size_t>(k * k), 0.0)};
    }
    auto add = [&](const std::string& name, const Tensor& data) {
      auto it = grams.find(name);
      if (it == grams.end() || data.dims().empty() || data.dims().back() != it->second.first) {
        return;
      }
      add_to_gram(it->second.second, data.data<float>(), data.numel() / it->second.first,
                  it->second.first);
    };
    for (const runtime::Feeds& set : sets) {
      for (const auto& [name, value] : set) {
        if (value.is_tensor() && value.tensor().dtype() == DataType::Float32) {
          add(name, value.tensor());
        }
      }
    }
    const std::string skipped =
        observe(float_graph, sets,
                [&](const ir::Value& v, const Tensor& data, size_t) { add(v.name(), data); });
    KILN_CHECK_ARG(skipped.empty(), "quantize: GPTQ's calibration cannot run: {}", skipped);
  }

  // Quantize, gate, and while the gate refuses keep the most drifting node float32 and try
  // again (at most fallback_nodes times): the accuracy-controlled fallback.
  // The quantized model with the nodes `excl` left float32, its counts into `r`, what the gate
  // watches into `node_of_output` (the quantized nodes' outputs, named before the rewrite: a
  // dynamic rewrite replaces the nodes).
  auto build = [&](const std::set<std::string>& excl, QuantizeResult& r,
                   std::map<std::string, std::string>& node_of_output, bool first) {
    ir::Model model = onnx_io::import_model_file(o.model_path);
    ir::Graph& g = *model.graph;
    const std::vector<Target> targets = find_targets(g, o, excl);
    node_of_output.clear();
    for (const Target& t : targets) {
      // An LSTM may leave Y empty and give only Y_h: the first output it gives.
      for (const ir::Value* out : t.node->outputs()) {
        if (!out) continue;
        node_of_output[out->name()] = t.display;
        break;
      }
    }

    std::set<ir::Value*> float_weights;
    for (const Target& t : targets) {
      float_weights.insert(t.node->input(1));
      if (t.node->op_type() == "LSTM") float_weights.insert(t.node->input(2));
    }
    // The dynamic model: MatMulInteger on DynamicQuantizeLinear's output.
    std::map<std::string, DynamicInput> dynamic_inputs;
    for (const Target& t : o.dynamic ? targets : std::vector<Target>{}) {
      if (t.node->op_type() == "LSTM") {  // quantizes X and h itself, at each run
        const LstmRewrite lw = rewrite_dynamic_lstm(g, t.node, o.per_channel);
        r.float_weight_bytes += lw.float_bytes;
        r.int8_weight_bytes += lw.int8_bytes;
        r.weights += 2;
        ++r.quantized_nodes;
        continue;
      }
      ir::Value* x = t.node->input(0);
      auto known = dynamic_inputs.find(x->name());
      if (known == dynamic_inputs.end()) {
        known = dynamic_inputs.emplace(x->name(), insert_dynamic_quantize(g, x, t.node)).first;
        ++r.activations;
      }
      r.float_weight_bytes += t.node->input(1)->constant().nbytes();
      r.int8_weight_bytes += static_cast<size_t>(t.node->input(1)->constant().numel());
      rewrite_dynamic(g, t, known->second, o.per_channel);
      ++r.weights;
      ++r.quantized_nodes;
    }

    // The INT4 weight-only model: MatMulNBits.
    for (const Target& t : o.int4 ? targets : std::vector<Target>{}) {
      const auto gram = grams.find(t.node->input(0)->name());
      if (t.node->inputs().size() > 2 && t.node->input(2) && t.node->input(2)->is_constant()) {
        float_weights.insert(t.node->input(2));  // a Gemm's C, read as the bias from now on
      }
      const Int4Rewrite w =
          rewrite_int4(g, t.node, {o.block_size, o.symmetric},
                       gram == grams.end() ? nullptr : &gram->second.second, o.gptq_damp);
      r.float_weight_bytes += w.float_bytes;
      r.int4_weight_bytes += w.int4_bytes;
      if (gram != grams.end() && w.rtn_reason.empty()) ++r.gptq_weights;
      if (!w.rtn_reason.empty() && first) {
        say(fmt::format("quantize: {}: GPTQ fell back to RTN: {}\n", t.display, w.rtn_reason));
      }
      ++r.weights;
      ++r.quantized_nodes;
    }

    // The QDQ model.
    std::map<std::string, ir::Value*> dequantized;  // activation name -> its DequantizeLinear
    for (const Target& t : o.dynamic || o.int4 ? std::vector<Target>{} : targets) {
      ir::Value* x = t.node->input(0);
      auto known = dequantized.find(x->name());
      if (known == dequantized.end()) {
        const auto [lo, hi] = ranges.at(x->name());
        known =
            dequantized.emplace(x->name(), insert_qdq(g, x, uint8_params(lo, hi), t.node)).first;
        ++r.activations;
      }
      t.node->set_input(0, known->second);
      ir::Value* w = t.node->input(1);
      r.float_weight_bytes += w->constant().nbytes();
      r.int8_weight_bytes += static_cast<size_t>(w->constant().numel());
      t.node->set_input(1, quantize_weight(g, w, t.weight_axis, o.per_channel, t.node));
      ++r.weights;
      ++r.quantized_nodes;
    }
    if (residuals) {
      r.quantized_residuals =
          quantize_residuals(g, targets, dequantized, ranges, [&](const std::string& name) {
            const auto [lo, hi] = ranges.at(name);
            return collapsed_fraction(stats.at(name), uint8_params(lo, hi).scale) > o.max_collapsed;
          });
    }
    if (!o.dynamic && !o.int4) quantize_max_pools(g, dequantized);
    remove_unread(g, float_weights);
    return model;
  };

  // The gate's outputs of a model on the calibration sets (float32 outputs, copied).
  std::set<std::string> outputs;
  for (const ir::Value* v : float_graph->outputs()) outputs.insert(v->name());
  auto outputs_of = [&](const std::shared_ptr<ir::Graph>& graph) {
    OutputSets out;
    for (const runtime::Feeds& set : sets) {
      observe(graph, {set}, [&](const ir::Value& v, const Tensor& data, size_t) {
        if (outputs.count(v.name())) out[v.name()].push_back(data.clone());
      });
    }
    return out;
  };
  const bool task_metric =
      o.max_drop || o.metric.kind != MetricKind::Cosine || !o.sensitivity_report.empty();
  std::optional<MetricEvaluator> evaluator;
  // Each candidate's drop when it alone is quantized (most sensitive first), when computed.
  std::vector<std::pair<std::string, double>> sensitivity;
  // The collapse trap (QuantizeOptions::max_collapsed): the readers of an activation most of
  // whose nonzero values would quantize to zero stay float32, before any gate runs.
  std::vector<std::pair<std::string, double>> collapsed;
  if (calibrate && o.max_collapsed < 1) {
    for (const Target& t : candidates) {
      const std::string& x = t.node->input(0)->name();
      const auto [lo, hi] = ranges.at(x);
      const UInt8Params p = uint8_params(lo, hi);
      const double share = collapsed_fraction(stats.at(x), p.scale);
      if (share <= o.max_collapsed) continue;
      collapsed.emplace_back(t.display, share);
      excluded.insert(t.display);
      say(fmt::format(
          "quantize: keeping {} float32: {:.0f} % of its input's nonzero values would quantize "
          "to zero (range [{:.4g}, {:.4g}], step {:.4g}): a few large values set the range (a "
          "detection head's coordinates beside its scores, an outlier channel); "
          "--max-collapsed 1 quantizes it anyway\n",
          t.display, 100 * share, std::min(lo, 0.f), std::max(hi, 0.f), p.scale));
    }
    KILN_CHECK_ARG(collapsed.size() < candidates.size(),
                   "quantize: every node's input would collapse to zero in INT8 (more than {} % "
                   "of its nonzero values under half a step): nothing left to quantize; "
                   "--max-collapsed 1 quantizes them anyway",
                   100 * o.max_collapsed);
  }
  const std::set<std::string> user_excluded = excluded;

  QuantizeResult r;
  ir::Model model;
  std::vector<std::string> kept_float;
  for (int attempt = 0;; ++attempt) {
    r = QuantizeResult{};
    r.calibration_sets = sets.size();
    r.calibration_cached = cached;
    std::map<std::string, std::string> node_of_output;
    model = build(excluded, r, node_of_output, attempt == 0);
    if (o.int4) {
      say(fmt::format(
          "quantize: {} of the model's {} nodes quantized ({} int4 weights as "
          "MatMulNBits, block {}, {}, {}: {:.2f} -> {:.2f} MiB), checked on {} input "
          "set{}\n",
          r.quantized_nodes, float_graph->node_count(), r.weights, o.block_size,
          o.symmetric ? "symmetric" : "asymmetric",
          o.int4_method == Int4Method::Gptq ? fmt::format("GPTQ ({} of them)", r.gptq_weights)
                                            : std::string("round to nearest"),
          static_cast<double>(r.float_weight_bytes) / (1 << 20),
          static_cast<double>(r.int4_weight_bytes) / (1 << 20), r.calibration_sets,
          r.calibration_sets == 1 ? "" : "s"));
    }
    const std::string how =
        o.dynamic ? std::string("dynamic: activations quantized at run time; checked on")
                  : fmt::format("calibrated ({}{}) on",
                                o.method == CalibrationMethod::Percentile
                                    ? fmt::format("percentile {}", o.percentile)
                                : o.method == CalibrationMethod::Entropy ? std::string("entropy")
                                                                         : std::string("minmax"),
                                cached ? ", ranges from the calibration cache" : "");
    if (!o.int4) {
      say(fmt::format(
          "quantize: {} of the model's {} nodes quantized ({} activations through {}, {} "
          "int8 weights: {:.2f} -> {:.2f} MiB{}), {} {} input set{}\n",
          r.quantized_nodes, float_graph->node_count(), r.activations,
          o.dynamic ? "DynamicQuantizeLinear" : "QuantizeLinear / DequantizeLinear", r.weights,
          static_cast<double>(r.float_weight_bytes) / (1 << 20),
          static_cast<double>(r.int8_weight_bytes) / (1 << 20),
          r.quantized_residuals > 0
              ? fmt::format("; {} residual Adds read their skip quantized", r.quantized_residuals)
              : "",
          how, r.calibration_sets, r.calibration_sets == 1 ? "" : "s"));
    }

    // The gate: both models on the calibration sets, set by set.
    std::map<std::string, Cosine> node_cos;
    std::map<std::string, Cosine> out_cos;
    std::map<std::string, std::pair<size_t, size_t>> top1;  // agreeing rows, rows
    OutputSets float_outputs, quantized_outputs;            // for the task metric
    for (size_t s = 0; s < sets.size(); ++s) {
      std::map<std::string, std::vector<float>> reference;
      std::map<std::string, std::vector<int64_t>> dims;
      observe(float_graph, {sets[s]}, [&](const ir::Value& v, const Tensor& data, size_t) {
        if (node_of_output.count(v.name()) || outputs.count(v.name())) {
          reference[v.name()] = copy_of(data);
          dims[v.name()] = data.dims();
        }
        if (task_metric && !evaluator && outputs.count(v.name())) {
          float_outputs[v.name()].push_back(data.clone());
        }
      });
      observe(model.graph, {sets[s]}, [&](const ir::Value& v, const Tensor& data, size_t) {
        auto ref = reference.find(v.name());
        if (ref == reference.end()) return;
        std::span<const float> q = data.values<float>();
        if (node_of_output.count(v.name())) node_cos[v.name()].add(ref->second, q);
        if (!outputs.count(v.name())) return;
        if (task_metric) quantized_outputs[v.name()].push_back(data.clone());
        out_cos[v.name()].add(ref->second, q);
        const std::vector<int64_t>& d = dims[v.name()];
        if (d.size() == 2 && d[1] > 1 && q.size() == ref->second.size()) {
          auto& [agree, rows] = top1[v.name()];
          for (int64_t row = 0; row < d[0]; ++row) {
            const float* a = ref->second.data() + row * d[1];
            const float* b = q.data() + row * d[1];
            agree += std::max_element(a, a + d[1]) - a == std::max_element(b, b + d[1]) - b;
            ++rows;
          }
        }
      });
    }
    for (const ir::Value* v : float_graph->outputs()) {
      if (!out_cos.count(v->name())) continue;
      OutputScore score{v->name(), out_cos[v->name()].value(), std::nullopt};
      if (auto it = top1.find(v->name()); it != top1.end() && it->second.second > 0) {
        score.top1 = static_cast<double>(it->second.first) / static_cast<double>(it->second.second);
      }
      r.outputs.push_back(score);
    }
    for (const auto& [value, c] : node_cos)
      r.worst_nodes.emplace_back(node_of_output[value], c.value());
    std::sort(r.worst_nodes.begin(), r.worst_nodes.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    if (r.worst_nodes.size() > 5) r.worst_nodes.resize(5);

    std::string worst;
    for (const auto& [name, c] : r.worst_nodes) {
      worst += fmt::format("{}{} {:.4f}", worst.empty() ? "" : ", ", name, c);
    }
    for (const OutputScore& s : r.outputs) {
      const bool cos_ok = s.cosine >= o.min_cosine;
      const bool top1_ok = !o.min_top1 || !s.top1 || *s.top1 >= *o.min_top1;
      say(fmt::format("quantize gate: output '{}': cosine {:.5f} (>= {}){}{}\n", s.name, s.cosine,
                      o.min_cosine,
                      s.top1 ? fmt::format(", top-1 agreement {:.4f}{}", *s.top1,
                                           o.min_top1 ? fmt::format(" (>= {})", *o.min_top1) : "")
                             : "",
                      cos_ok && top1_ok ? "" : "  FAIL"));
      if ((!cos_ok || !top1_ok) && r.pass) {
        r.pass = false;
        r.failure = fmt::format(
            "output '{}' {} (cosine {:.5f}{}); the quantized nodes that drift most: {}", s.name,
            !cos_ok ? fmt::format("has cosine below {}", o.min_cosine)
                    : fmt::format("has top-1 agreement below {}", *o.min_top1),
            s.cosine, s.top1 ? fmt::format(", top-1 {:.4f}", *s.top1) : "", worst);
      }
    }
    if (!worst.empty())
      say(fmt::format("quantize gate: nodes whose outputs drift most: {}\n", worst));
    if (task_metric) {
      if (!evaluator) evaluator.emplace(o.metric, std::move(float_outputs));
      const double reference = evaluator->reference_score();
      const double score = evaluator->score(quantized_outputs);
      const double drop = evaluator->higher_is_better() ? reference - score : score - reference;
      r.metric_reference = reference;
      r.metric_score = score;
      r.metric_drop = drop;
      const bool ok = !o.max_drop || drop <= *o.max_drop;
      say(fmt::format(
          "quantize gate: metric {}: float model {:.5f}, quantized {:.5f}, {} {:.5f}{}{}\n",
          metric_name(o.metric), reference, score, evaluator->higher_is_better() ? "drop" : "rise",
          drop, o.max_drop ? fmt::format(" (<= {})", *o.max_drop) : "", ok ? "" : "  FAIL"));
      // Each node's own effect, once: needed to rank the fallback under --max-drop, or asked for.
      if (attempt == 0 && (!o.sensitivity_report.empty() || (o.max_drop && !ok))) {
        std::vector<std::string> names;
        for (const Target& t : find_targets(*float_graph, o, user_excluded)) {
          names.push_back(t.display);
        }
        say(
            fmt::format("quantize: sensitivity: the metric with each of the {} nodes quantized "
                        "alone ({} runs of the model on {} input sets)\n",
                        names.size(), names.size(), sets.size()));
        for (const std::string& name : names) {
          std::set<std::string> only = user_excluded;
          for (const std::string& other : names) {
            if (other != name) only.insert(other);
          }
          QuantizeResult counts;
          std::map<std::string, std::string> watched;
          const ir::Model alone = build(only, counts, watched, false);
          sensitivity.emplace_back(name, evaluator->drop(outputs_of(alone.graph)));
        }
        std::stable_sort(sensitivity.begin(), sensitivity.end(),
                         [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string top;
        for (size_t i = 0; i < sensitivity.size() && i < 5; ++i) {
          top += fmt::format("{}{} {:.5f}", i ? ", " : "", sensitivity[i].first,
                             sensitivity[i].second);
        }
        say(fmt::format(
            "quantize: most sensitive nodes (the metric's {} when alone quantized): {}\n",
            evaluator->higher_is_better() ? "drop" : "rise", top));
        if (!o.sensitivity_report.empty()) {
          write_sensitivity_report(o.sensitivity_report, metric_name(o.metric), reference, score,
                                   drop, sensitivity, evaluator->higher_is_better());
          say(fmt::format("quantize: wrote the sensitivity report {}\n", o.sensitivity_report));
        }
      }
      if (!ok && r.pass) {
        r.pass = false;
        std::string ranked;
        if (!sensitivity.empty()) {
          size_t shown = 0;
          for (const auto& [name, d] : sensitivity) {
            if (excluded.count(name) || shown == 5) continue;
            ranked += fmt::format("{}{} ({:.5f})", shown++ ? ", " : "", name, d);
          }
        }
        r.failure = fmt::format(
            "metric {} {} {:.5f} from the float model's {:.5f}, past --max-drop {}; {}",
            metric_name(o.metric), evaluator->higher_is_better() ? "drops" : "rises", drop,
            reference, *o.max_drop,
            ranked.empty() ? fmt::format("the quantized nodes that drift most: {}", worst)
                           : fmt::format("the most sensitive nodes still quantized: {}", ranked));
      }
    }
    r.sensitivity = sensitivity;
    if (r.pass || attempt >= o.fallback_nodes || r.worst_nodes.empty() || r.quantized_nodes <= 1) {
      break;
    }
    // The next node to keep float32: under --max-drop the most sensitive one left, else the one
    // whose output drifts most.
    std::string node;
    std::string why;
    for (const auto& [name, d] : sensitivity) {
      if (!excluded.count(name)) {
        node = name;
        why = fmt::format("its drop alone {:.5f}", d);
        break;
      }
    }
    if (node.empty()) {
      node = r.worst_nodes.front().first;
      why = fmt::format("its output's cosine {:.4f}", r.worst_nodes.front().second);
    }
    kept_float.push_back(node);
    excluded.insert(node);
    say(fmt::format("quantize: keeping {} float32 ({}) and trying again\n", node, why));
  }
  r.kept_float = kept_float;
  r.collapsed = collapsed;
  if (!kept_float.empty()) {
    say(fmt::format("quantize: {} node{} kept float32 by the fallback: {}\n", kept_float.size(),
                    kept_float.size() == 1 ? "" : "s", fmt::join(kept_float, ", ")));
  }
  if (!r.pass && !o.allow_drift) {
    fail(ErrorCode::InvalidArgument,
         "quantize gate: {}. The model was not written; --allow-drift writes it anyway, "
         "--exclude-node keeps a node in float32, --fallback-nodes lets the fallback keep more",
         r.failure);
  }
  if (o.int4) {
    // onnxruntime ran MiniLM's INT4 file 9 % slower with Kiln's inferred shapes of the
    // intermediate values in it (its own quantizer writes none, and Kiln infers them again).
    onnx::ModelProto p = onnx_io::export_model(model);
    p.mutable_graph()->clear_value_info();
    std::ofstream out(o.output_path, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out.good(), ErrorCode::NotFound, "quantize: cannot write '{}'", o.output_path);
    KILN_CHECK(p.SerializeToOstream(&out), ErrorCode::Internal,
               "quantize: cannot serialize the model to '{}' (over 2 GiB?)", o.output_path);
  } else {
    onnx_io::save_model_file(model, o.output_path);
  }
  say(fmt::format("wrote {}\n", o.output_path));
  return r;
}

}  // namespace kiln::compiler
