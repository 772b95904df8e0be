#include "compiler/quantize_lstm.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include "ops/matmul_nbits_layout.hpp"

namespace kiln::compiler {
namespace {

constexpr int kMicrosoftOpset = 1;
enum Slot : size_t { kX = 0, kW, kR, kB, kSeqLens, kInitH, kInitC, kP };

bool constant_float_3d(const ir::Value* v) {
  return v && v->is_constant() && v->constant().dtype() == DataType::Float32 &&
         v->constant().dims().size() == 3;
}

struct Int8Weight {
  Tensor codes;  // [dirs, K, rows]: transposed, the gate rows along the last dim
  Tensor scale;  // [dirs, rows] or [dirs]
  Tensor zero;   // int8 zeros, scale's shape
};

// w: [dirs, rows, K] float32 -> int8 symmetric, one scale per (direction, row) or per direction.
Int8Weight quantize_transposed(const Tensor& w, bool per_channel) {
  const int64_t dirs = w.dims()[0], rows = w.dims()[1], k = w.dims()[2];
  const std::vector<int64_t> scale_dims =
      per_channel ? std::vector<int64_t>{dirs, rows} : std::vector<int64_t>{dirs};
  Int8Weight q{Tensor(DataType::Int8, {dirs, k, rows}), Tensor(DataType::Float32, scale_dims),
               Tensor(DataType::Int8, scale_dims)};
  const float* src = w.data<float>();
  const int64_t groups = per_channel ? rows : 1;
  for (int64_t d = 0; d < dirs; ++d) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      const int64_t first = per_channel ? gi : 0, last = per_channel ? gi + 1 : rows;
      float amax = 0.f;
      for (int64_t r = first; r < last; ++r) {
        for (int64_t c = 0; c < k; ++c)
          amax = std::max(amax, std::fabs(src[(d * rows + r) * k + c]));
      }
      const float s = amax > 0 ? amax / 127.f : 1.f;
      q.scale.data<float>()[d * groups + gi] = s;
      q.zero.data<int8_t>()[d * groups + gi] = 0;
      for (int64_t r = first; r < last; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const long code = std::clamp(std::lround(src[(d * rows + r) * k + c] / s), -127L, 127L);
          q.codes.data<int8_t>()[(d * k + c) * rows + r] = static_cast<int8_t>(code);
        }
      }
    }
  }
  return q;
}

}  // namespace

std::string dynamic_lstm_refusal(const ir::Node& lstm) {
  const ir::Attribute* layout = lstm.attribute("layout");
  if (layout && layout->get<int64_t>("layout") != 0) {
    return "layout 1 (batch first): DynamicQuantizeLSTM has layout 0 only";
  }
  if (const ir::Attribute* acts = lstm.attribute("activations")) {
    const auto& names = acts->get<std::vector<std::string>>("activations");
    for (size_t i = 0; i < names.size(); ++i) {
      std::string a = names[i];
      std::transform(a.begin(), a.end(), a.begin(),
                     [](unsigned char ch) { return std::tolower(ch); });
      if (a != (i % 3 == 0 ? "sigmoid" : "tanh")) {
        return fmt::format("activation '{}': only the defaults Sigmoid, Tanh, Tanh", names[i]);
      }
    }
  }
  if (lstm.inputs().size() > kSeqLens && lstm.input(kSeqLens)) {
    return "sequence_lens: Kiln's DynamicQuantizeLSTM runs whole sequences only";
  }
  const ir::Value* x = lstm.input(kX);
  if (!x || !x->type().is_tensor() || x->type().dtype != DataType::Float32) {
    return "X is not float32";
  }
  if (!constant_float_3d(lstm.input(kW)) || !constant_float_3d(lstm.input(kR))) {
    return "W and R must be constant float32 [dirs, 4 hidden, K]";
  }
  const auto& w = lstm.input(kW)->constant().dims();
  const auto& r = lstm.input(kR)->constant().dims();
  if (w[0] != r[0] || w[1] != r[1] || r[1] != 4 * r[2]) {
    return fmt::format(
        "W {} and R {} are not an LSTM's [dirs, 4 hidden, K], [dirs, 4 hidden, "
        "hidden]",
        fmt::join(w, "x"), fmt::join(r, "x"));
  }
  for (size_t i = kB; i < lstm.inputs().size(); ++i) {
    const ir::Value* v = lstm.input(i);
    if (v && (!v->type().is_tensor() || v->type().dtype != DataType::Float32)) {
      return fmt::format("input {} is not float32", i);
    }
  }
  return "";
}

LstmRewrite rewrite_dynamic_lstm(ir::Graph& g, ir::Node* n, bool per_channel) {
  LstmRewrite out;
  ir::Value* w = n->input(kW);
  ir::Value* r = n->input(kR);
  out.float_bytes = w->constant().nbytes() + r->constant().nbytes();
  out.int8_bytes = static_cast<size_t>(w->constant().numel() + r->constant().numel());
  auto add_weight = [&](ir::Value* v) {
    Int8Weight q = quantize_transposed(v->constant(), per_channel);
    const std::string base = v->name();
    return std::array<ir::Value*, 3>{
        g.add_initializer(g.unique_name(base + "_quantized"), std::move(q.codes)),
        g.add_initializer(g.unique_name(base + "_scale"), std::move(q.scale)),
        g.add_initializer(g.unique_name(base + "_zero_point"), std::move(q.zero))};
  };
  const auto wq = add_weight(w);
  const auto rq = add_weight(r);
  std::vector<ir::Value*> inputs(12, nullptr);
  inputs[kX] = n->input(kX);
  inputs[kW] = wq[0];
  inputs[kR] = rq[0];
  for (size_t i = kB; i <= kP; ++i) inputs[i] = n->inputs().size() > i ? n->input(i) : nullptr;
  inputs[8] = wq[1];
  inputs[9] = wq[2];
  inputs[10] = rq[1];
  inputs[11] = rq[2];
  std::vector<ir::Value*> outputs;
  for (ir::Value* o : n->outputs()) {
    outputs.push_back(o ? g.add_value(g.unique_name(o->name() + "_int8"), o->type()) : nullptr);
  }
  const std::string base = n->name().empty() ? "LSTM" : n->name();
  ir::Node* m = g.insert_node_before(n, "DynamicQuantizeLSTM", ops::kMicrosoftDomain,
                                     g.unique_name(base + "_quant"), inputs, outputs);
  m->set_opset(kMicrosoftOpset);
  for (const auto& [name, attr] : n->attributes()) {
    if (name != "layout") m->set_attribute(name, attr);
  }
  std::vector<std::string> names(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i]) continue;
    names[i] = n->output(i)->name();
    g.replace_uses(n->output(i), outputs[i]);
  }
  g.remove_node(n);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] && outputs[i]->name() != names[i]) g.rename_value(outputs[i], names[i]);
  }
  g.opsets()[ops::kMicrosoftDomain] = kMicrosoftOpset;
  return out;
}

}  // namespace kiln::compiler
