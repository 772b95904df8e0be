#include "compiler/quantize_int4.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ops/matmul_nbits_layout.hpp"

namespace kiln::compiler {
namespace {

constexpr int kMicrosoftOpset = 1;

float float_attr(const ir::Node& n, const char* name, float fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a ? a->get<float>(name) : fallback;
}

bool trans_b(const ir::Node& n) {
  const ir::Attribute* a = n.attribute("transB");
  return n.op_type() == "Gemm" && a && a->get<int64_t>("transB") != 0;
}

const ir::Value* gemm_c(const ir::Node& n) {
  return n.op_type() == "Gemm" && n.inputs().size() > 2 ? n.input(2) : nullptr;
}

// A C that reads as one value per output column (or one for all): it becomes the bias.
bool c_is_bias(const Tensor& c, int64_t n) {
  const std::vector<int64_t>& d = c.dims();
  if (c.numel() == 1) return d.size() <= 2;
  return c.numel() == n && !d.empty() && d.back() == n && d.size() <= 2;
}

// The Add that only adds a constant vector of N to `y` (a MatMul's bias, as exporters write
// it), when `y` has no other reader: it becomes MatMulNBits' bias, so the product and the bias
// run as one kernel (and one primitive) in Kiln and in onnxruntime. nullptr otherwise.
ir::Node* bias_add_after(const ir::Graph& g, const ir::Value* y, int64_t n, size_t& slot) {
  if (g.is_output(y)) return nullptr;
  const auto uses = g.compute_uses();
  const auto it = uses.find(y);
  if (it == uses.end() || it->second.size() != 1) return nullptr;
  ir::Node* add = it->second[0];
  if (add->op_type() != "Add" || !add->domain().empty() || add->inputs().size() != 2) {
    return nullptr;
  }
  slot = add->input(0) == y ? 1 : 0;
  const ir::Value* b = add->input(slot);
  if (!b || b == y || !b->is_constant() || b->constant().dtype() != DataType::Float32) {
    return nullptr;
  }
  // Every dim before the last 1, and no more dims than y has: y's shape is the sum's.
  const std::vector<int64_t>& d = b->constant().dims();
  const auto& ys = y->type().shape;
  if (d.empty() || d.back() != n || !ys || d.size() > ys->rank()) return nullptr;
  for (size_t i = 0; i + 1 < d.size(); ++i) {
    if (d[i] != 1) return nullptr;
  }
  return add;
}

Tensor scaled_copy(const Tensor& t, float factor) {
  Tensor out(DataType::Float32, t.dims());
  const float* s = t.data<float>();
  float* d = out.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = s[i] * factor;
  return out;
}

}  // namespace

int64_t int4_weight_rows(const ir::Node& n) {
  const std::vector<int64_t>& d = n.input(1)->constant().dims();
  return trans_b(n) ? d[1] : d[0];
}

std::string int4_refusal(const ir::Node& n) {
  const std::vector<int64_t>& d = n.input(1)->constant().dims();
  if (d.size() != 2 || d[0] == 0 || d[1] == 0) return "its weight is not a non-empty 2-D matrix";
  const ir::Value* a = n.input(0);
  if (a->type().shape && a->type().shape->rank() < 2) {
    return "its activation is 1-D (MatMulNBits reads rows of K)";
  }
  const ir::Value* c = gemm_c(n);
  if (c && !c->is_constant() && float_attr(n, "beta", 1.f) != 1.f) {
    return "Gemm's C is computed and beta is not 1";
  }
  if (c && c->is_constant() && c->constant().dtype() != DataType::Float32) {
    return "Gemm's C is not float32";
  }
  return "";
}

Int4Rewrite rewrite_int4(ir::Graph& g, ir::Node* n, const Int4Params& p,
                         const std::vector<double>* gram, double damp) {
  const bool gemm = n->op_type() == "Gemm";
  const bool tb = trans_b(*n);
  const float alpha = gemm ? float_attr(*n, "alpha", 1.f) : 1.f;
  const float beta = gemm ? float_attr(*n, "beta", 1.f) : 1.f;
  const Tensor& wt = n->input(1)->constant();
  const int64_t k = tb ? wt.dims()[1] : wt.dims()[0];
  const int64_t cols = tb ? wt.dims()[0] : wt.dims()[1];
  // The [K, N] weight, alpha folded in: quantizing alpha W is quantizing W with scaled scales.
  std::vector<float> w(static_cast<size_t>(k * cols));
  const float* src = wt.data<float>();
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      w[static_cast<size_t>(r * cols + c)] = alpha * (tb ? src[c * k + r] : src[r * cols + c]);
    }
  }
  Int4Rewrite out;
  out.float_bytes = wt.nbytes();
  Int4Weight q;
  if (gram) out.rtn_reason = quantize_int4_gptq(w.data(), k, cols, p, *gram, damp, q);
  if (!gram || !out.rtn_reason.empty()) q = quantize_int4_rtn(w.data(), k, cols, p);
  out.int4_bytes = q.bytes();

  const std::string base = n->input(1)->name();
  Tensor codes(DataType::UInt8, {cols, q.blocks, q.blob});
  std::copy(q.codes.begin(), q.codes.end(), codes.data<uint8_t>());
  Tensor scales(DataType::Float32, {cols, q.blocks});
  std::copy(q.scales.begin(), q.scales.end(), scales.data<float>());
  std::vector<ir::Value*> inputs = {
      n->input(0), g.add_initializer(g.unique_name(base + "_Q4"), std::move(codes)),
      g.add_initializer(g.unique_name(base + "_scales"), std::move(scales))};
  if (!q.zero_points.empty()) {
    Tensor zp(DataType::UInt8, {cols, (q.blocks + 1) / 2});
    std::copy(q.zero_points.begin(), q.zero_points.end(), zp.data<uint8_t>());
    inputs.push_back(g.add_initializer(g.unique_name(base + "_zero_points"), std::move(zp)));
  }
  ir::Value* c = gemm_c(*n) ? n->input(2) : nullptr;
  ir::Value* add_after = nullptr;
  if (c && c->is_constant() && c_is_bias(c->constant(), cols)) {
    const Tensor& ct = c->constant();
    Tensor bias(DataType::Float32, {cols});
    for (int64_t i = 0; i < cols; ++i) {
      bias.data<float>()[i] = beta * ct.data<float>()[ct.numel() == 1 ? 0 : i];
    }
    inputs.resize(5, nullptr);  // zero_points (when symmetric) and g_idx left empty
    inputs.push_back(g.add_initializer(g.unique_name(base + "_bias"), std::move(bias)));
  } else if (c && c->is_constant()) {
    add_after = beta == 1.f ? c
                            : g.add_initializer(g.unique_name(c->name() + "_beta"),
                                                scaled_copy(c->constant(), beta));
  } else if (c) {
    add_after = c;  // beta is 1 here (int4_refusal)
  }
  // A MatMul's bias Add folded into the op (its output keeps the Add's name from then on).
  size_t bias_slot = 0;
  ir::Node* bias_add = gemm ? nullptr : bias_add_after(g, n->output(0), cols, bias_slot);
  if (bias_add) {
    const Tensor& bt = bias_add->input(bias_slot)->constant();
    Tensor bias(DataType::Float32, {cols});
    std::copy(bt.data<float>(), bt.data<float>() + cols, bias.data<float>());
    inputs.resize(5, nullptr);
    inputs.push_back(g.add_initializer(g.unique_name(base + "_bias"), std::move(bias)));
  }

  ir::Value* old = n->output(0);
  const std::string name = old->name();
  ir::Value* y = g.add_value(g.unique_name(name + "_int4"), old->type());
  ir::Node* m = g.insert_node_before(n, "MatMulNBits", ops::kMicrosoftDomain,
                                     g.unique_name(name + "_MatMulNBits"), inputs, {y});
  m->set_opset(kMicrosoftOpset);
  m->set_attribute("K", ir::Attribute(k));
  m->set_attribute("N", ir::Attribute(cols));
  m->set_attribute("bits", ir::Attribute(int64_t{4}));
  m->set_attribute("block_size", ir::Attribute(p.block_size));
  if (add_after) {
    ir::Value* sum = g.add_value(g.unique_name(name + "_sum"), old->type());
    g.insert_node_before(n, "Add", "", sum->name() + "_Add", {y, add_after}, {sum})
        ->set_opset(g.opsets().at(""));
    y = sum;
  }
  // The result (the node's output, or the folded Add's) is read from y from now on; removing
  // the nodes removes their outputs.
  ir::Value* result = bias_add ? bias_add->output(0) : old;
  const std::string result_name = result->name();
  if (bias_add) out.folded_bias = bias_add->input(bias_slot);
  g.replace_uses(result, y);
  if (bias_add) g.remove_node(bias_add);
  g.remove_node(n);
  if (y->name() != result_name) g.rename_value(y, result_name);
  out.output = result_name;
  g.opsets()[ops::kMicrosoftDomain] = kMicrosoftOpset;
  return out;
}

}  // namespace kiln::compiler
