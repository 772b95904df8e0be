#include "backends/gpu/runtime/gemm_node.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "backends/gpu/runtime/node_attrs.hpp"
#include "core/error.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::GemmActivation;

// ops::FusedActivation's names and parameter counts (the GPU library carries the IR but not the
// ops' readers).
constexpr std::array<std::pair<GemmActivation, const char*>, 11> kActivations = {{
    {GemmActivation::None, "None"},
    {GemmActivation::Relu, "Relu"},
    {GemmActivation::Clip, "Clip"},
    {GemmActivation::Sigmoid, "Sigmoid"},
    {GemmActivation::Silu, "Silu"},
    {GemmActivation::HardSwish, "HardSwish"},
    {GemmActivation::HardSigmoid, "HardSigmoid"},
    {GemmActivation::LeakyRelu, "LeakyRelu"},
    {GemmActivation::Tanh, "Tanh"},
    {GemmActivation::Gelu, "Gelu"},
    {GemmActivation::GeluTanh, "GeluTanh"},
}};

size_t param_count(GemmActivation a) {
  switch (a) {
    case GemmActivation::Clip:
    case GemmActivation::HardSigmoid:
      return 2;
    case GemmActivation::LeakyRelu:
      return 1;
    default:
      return 0;
  }
}

bool all_ones(const std::vector<Dim>& dims, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (!(dims[i] == Dim(1))) return false;
  }
  return true;
}

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

std::string read_activation(const ir::Node& node, GemmNode& out) {
  return read_fused_activation(node, out.activation, out.act_alpha, out.act_beta);
}

}  // namespace

std::string read_fused_activation(const ir::Node& node, kernels::GemmActivation& act, float& alpha,
                                  float& beta) {
  const std::string name = string_attr(node, "activation", "None");
  bool known = false;
  for (const auto& [kind, text] : kActivations) {
    if (name == text) {
      act = kind;
      known = true;
    }
  }
  if (!known) return fmt::format("unknown fused activation '{}'", name);
  const std::vector<float> params = floats_attr(node, "activation_params");
  if (params.size() != param_count(act)) {
    return fmt::format("fused activation {} takes {} parameters, got {}", name, param_count(act),
                       params.size());
  }
  if (!params.empty()) alpha = params[0];
  if (params.size() > 1) beta = params[1];
  return "";
}

std::string read_fused_residual(const ir::Node& node, DataType dtype, bool& present) {
  const bool fused = node.domain() == "ai.kiln";
  const ir::Value* z = fused && node.inputs().size() > 3 ? node.input(3) : nullptr;
  present = z != nullptr;
  if (z && (!z->type().is_tensor() || z->type().dtype != dtype)) {
    return "FusedConv's residual Z must be a tensor of the input's type";
  }
  return "";
}

std::string read_gemm_node(const ir::Node& node, GemmNode& out) {
  const bool fused = node.domain() == "ai.kiln";
  if (!(node.domain().empty() || fused) || (node.op_type() != (fused ? "FusedMatMul" : "MatMul") &&
                                            node.op_type() != (fused ? "FusedGemm" : "Gemm"))) {
    return fmt::format("no GPU kernel for {}", node.op_type());
  }
  out.gemm = node.op_type() == "Gemm" || node.op_type() == "FusedGemm";
  if (fused) {
    if (std::string why = read_activation(node, out); !why.empty()) return why;
  }
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  if (!a || !b || !node.output(0)) return "missing operands";
  const TypeInfo& ta = a->type();
  const TypeInfo& tb = b->type();
  if (!ta.is_tensor() || !tb.is_tensor() || ta.dtype != tb.dtype ||
      (ta.dtype != DataType::Float32 && ta.dtype != DataType::Float16)) {
    return fmt::format("{} on the GPU takes float32 or float16 operands, not {} and {}",
                       node.op_type(), ta.to_string(), tb.to_string());
  }
  out.dtype = ta.dtype;
  if (!ta.shape || !tb.shape) return "operand ranks not known";
  const std::vector<Dim>& da = ta.shape->dims();
  const std::vector<Dim>& db = tb.shape->dims();
  if (out.gemm) {
    out.trans_a = int_attr(node, "transA", 0) != 0;
    out.trans_b = int_attr(node, "transB", 0) != 0;
    out.alpha = float_attr(node, "alpha", 1.f);
    out.beta = float_attr(node, "beta", 1.f);
    if (da.size() != 2 || db.size() != 2) return "Gemm operands must be 2-D";
    const ir::Value* c = node.inputs().size() > 2 ? node.input(2) : nullptr;
    if (!c || out.beta == 0.f) return "";
    if (!c->type().is_tensor() || c->type().dtype != ta.dtype || !c->type().shape) {
      return "Gemm's C must be a tensor of the operands' type";
    }
    const std::vector<Dim>& dc = c->type().shape->dims();
    const Dim n = out.trans_b ? db[0] : db[1];
    const Dim m = out.trans_a ? da[1] : da[0];
    const Dim one(1);
    if ((dc.size() == 1 && dc[0] == n) || (dc.size() == 2 && dc[0] == one && dc[1] == n)) {
      out.c = GemmNode::C::Row;
    } else if (dc.size() == 2 && dc[0] == m && dc[1] == n) {
      out.c = GemmNode::C::Full;
    } else if (dc.size() == 2 && dc[0] == m && dc[1] == one) {
      out.c = GemmNode::C::Column;
    } else if (dc.empty() || (dc.size() == 1 && dc[0] == one) ||
               (dc.size() == 2 && dc[0] == one && dc[1] == one)) {
      out.c = GemmNode::C::Scalar;
    } else {
      return fmt::format("Gemm's C of shape {} does not broadcast to [M, N]",
                         c->type().shape->to_string());
    }
    return "";
  }
  if (da.size() < 2 || db.size() < 2) {
    return "MatMul with a vector operand is not supported on the GPU yet";
  }
  // FusedMatMul's bias: one value per output column.
  const ir::Value* bias = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (bias) {
    const TypeInfo& t = bias->type();
    if (!t.is_tensor() || t.dtype != ta.dtype || !t.shape || t.shape->rank() != 1 ||
        !(t.shape->dims()[0] == db.back())) {
      return "FusedMatMul's bias must be [N] of the operands' type";
    }
    out.c = GemmNode::C::Row;
  }
  if (db.size() == 2) return "";  // A's leading dims fold into M
  if (da.size() != db.size()) return "MatMul of operands of different ranks (both above 2)";
  const size_t batch = da.size() - 2;
  bool equal = true;
  for (size_t i = 0; i < batch; ++i) equal &= da[i] == db[i];
  if (equal || all_ones(da, batch) || all_ones(db, batch)) return "";
  return "MatMul whose batch dims broadcast partly is not supported on the GPU yet";
}

kernels::UnaryParams gemm_activation_params(const GemmNode& g) {
  using kernels::UnaryOp;
  switch (g.activation) {
    case GemmActivation::None:
    case GemmActivation::Relu:
      return {UnaryOp::Relu};
    case GemmActivation::Clip:
      return {UnaryOp::Clip, g.act_alpha, g.act_beta};
    case GemmActivation::Sigmoid:
      return {UnaryOp::Sigmoid};
    case GemmActivation::Silu:
      return {UnaryOp::Silu};
    case GemmActivation::HardSwish:
      return {UnaryOp::HardSwish};
    case GemmActivation::HardSigmoid:
      return {UnaryOp::HardSigmoid, g.act_alpha, g.act_beta};
    case GemmActivation::LeakyRelu:
      return {UnaryOp::LeakyRelu, g.act_alpha};
    case GemmActivation::Tanh:
      return {UnaryOp::Tanh};
    case GemmActivation::Gelu:
      return {UnaryOp::GeluErf};
    case GemmActivation::GeluTanh:
      return {UnaryOp::GeluTanh};
  }
  return {};
}

GemmDims gemm_dims(const GemmNode& g, const DeviceTensor& a, const DeviceTensor& b,
                   std::string_view label) {
  GemmDims d;
  if (g.gemm) {
    KILN_CHECK_ARG(a.dims.size() == 2 && b.dims.size() == 2, "Gemm {}: operands {} and {} not 2-D",
                   label, dims_to_string(a.dims), dims_to_string(b.dims));
    d.m = g.trans_a ? a.dims[1] : a.dims[0];
    d.k = g.trans_a ? a.dims[0] : a.dims[1];
    d.n = g.trans_b ? b.dims[0] : b.dims[1];
    KILN_CHECK_ARG((g.trans_b ? b.dims[1] : b.dims[0]) == d.k,
                   "Gemm {}: inner dims of {} and {} differ", label, dims_to_string(a.dims),
                   dims_to_string(b.dims));
    d.out_dims = {d.m, d.n};
    return d;
  }
  const size_t ra = a.dims.size(), rb = b.dims.size();
  KILN_CHECK_ARG(ra >= 2 && rb >= 2, "MatMul {}: operands {} and {} below 2-D", label,
                 dims_to_string(a.dims), dims_to_string(b.dims));
  d.k = a.dims[ra - 1];
  d.n = b.dims[rb - 1];
  KILN_CHECK_ARG(b.dims[rb - 2] == d.k, "MatMul {}: inner dims of {} and {} differ", label,
                 dims_to_string(a.dims), dims_to_string(b.dims));
  d.out_dims.assign(a.dims.begin(), a.dims.end() - 1);
  if (rb == 2) {
    d.m = product(a.dims, 0, ra - 1);  // A's leading dims fold into M
  } else {
    d.m = a.dims[ra - 2];
    const int64_t ba = product(a.dims, 0, ra - 2), bb = product(b.dims, 0, rb - 2);
    KILN_CHECK_ARG(ra == rb && (ba == bb || ba == 1 || bb == 1),
                   "MatMul {}: batch dims of {} and {} do not broadcast", label,
                   dims_to_string(a.dims), dims_to_string(b.dims));
    d.batch = std::max(ba, bb);
    d.stride_a = ba == 1 ? 0 : d.m * d.k;
    d.stride_b = bb == 1 ? 0 : d.k * d.n;
    if (ba == 1) {
      d.out_dims.assign(b.dims.begin(), b.dims.end() - 2);
      d.out_dims.push_back(d.m);
    }
  }
  d.out_dims.push_back(d.n);
  return d;
}

}  // namespace kiln::backends::gpu
