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
  g.replace_uses(old, y);
  g.remove_node(n);
  if (y->name() != name) g.rename_value(y, name);
  g.opsets()[ops::kMicrosoftDomain] = kMicrosoftOpset;
  return out;
}

}  // namespace kiln::compiler
