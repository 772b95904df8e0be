#include "passes/activation_patterns.hpp"
#include "passes/batchnorm_folding.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

using ops::Activation;

// The static dims of a constant's shape right-aligned to `rank` (leading 1s); nullopt when the
// constant has more dims than that.
std::optional<std::vector<int64_t>> aligned_dims(const Tensor& t, size_t rank) {
  if (t.rank() > rank) return std::nullopt;
  std::vector<int64_t> d(rank - t.rank(), 1);
  d.insert(d.end(), t.dims().begin(), t.dims().end());
  return d;
}

// The Add that is the only reader of `v`, with a constant of v's float or double type as its
// other operand; nullptr otherwise.
ir::Node* constant_add(const Rewriter& rw, ir::Value* v, ir::Value** constant) {
  if (!rw.single_use(v) || !v->type().is_tensor()) return nullptr;
  ir::Node* add = rw.readers(v)[0];
  if (!is_op(add, "Add") || add->outputs().size() != 1) return nullptr;
  ir::Value* c = other_input(*add, v);
  const DataType t = v->type().dtype;
  if (!c || c == v || !c->is_constant() || c->constant().dtype() != t ||
      (t != DataType::Float32 && t != DataType::Float64)) {
    return nullptr;
  }
  *constant = c;
  return add;
}

// Conv -> Add(constant per-channel bias): the bias joins the Conv's B.
bool fold_conv_bias(Rewriter& rw, ir::Node& conv) {
  ir::Value* y = conv.output(0);
  ir::Value* bias = nullptr;
  ir::Node* add = constant_add(rw, y, &bias);
  const ir::Value* w = conv.input(1);
  if (!add || !w || !w->type().is_tensor() || !w->type().shape) return false;
  const Shape& ws = *w->type().shape;
  if (ws.rank() < 3 || !ws[0].is_static()) return false;
  const int64_t m = ws[0].value();
  std::optional<std::vector<int64_t>> bd = aligned_dims(bias->constant(), ws.rank());
  if (!bd) return false;
  for (size_t i = 0; i < bd->size(); ++i) {
    if ((*bd)[i] != 1 && !(i == 1 && (*bd)[i] == m)) return false;
  }
  const ir::Value* b = conv.input(2);
  if (b && (!b->is_constant() || b->constant().dtype() != bias->constant().dtype() ||
            b->constant().numel() != m)) {
    return false;
  }
  Tensor new_b(bias->constant().dtype(), {m});
  for (int64_t c = 0; c < m; ++c) {
    const double old = b ? element(b->constant(), c) : 0.0;
    set_element(new_b, c, old + element(bias->constant(), (*bd)[1] == 1 ? 0 : c));
  }
  conv.set_input(2, rw.new_constant(y->name() + "_bias", std::move(new_b)));
  rw.touch(conv);
  y->set_type(add->output(0)->type());
  rw.replace(add->output(0), y, {add});
  return true;
}

// Gemm -> Add(constant broadcast to [M, N]): the constant joins C (and beta becomes 1).
bool fold_gemm_bias(Rewriter& rw, ir::Node& gemm) {
  ir::Value* y = gemm.output(0);
  ir::Value* bias = nullptr;
  ir::Node* add = constant_add(rw, y, &bias);
  if (!add || rank_of(y) != 2u) return false;
  const Shape& ys = *y->type().shape;
  std::optional<std::vector<int64_t>> bd = aligned_dims(bias->constant(), 2);
  if (!bd) return false;
  for (size_t i = 0; i < 2; ++i) {
    if ((*bd)[i] != 1 && !(ys[i].is_static() && ys[i].value() == (*bd)[i])) return false;
  }
  const ir::Value* c = gemm.input(2);
  std::vector<int64_t> cd = {1, 1};
  if (c) {
    if (!c->is_constant() || c->constant().dtype() != bias->constant().dtype()) return false;
    std::optional<std::vector<int64_t>> d = aligned_dims(c->constant(), 2);
    if (!d) return false;
    cd = *d;
  }
  const int64_t rows = std::max(cd[0], (*bd)[0]), cols = std::max(cd[1], (*bd)[1]);
  if ((cd[0] != 1 && cd[0] != rows) || (cd[1] != 1 && cd[1] != cols)) return false;
  const double beta = float_attr(gemm, "beta", 1.0f);
  Tensor new_c(bias->constant().dtype(),
               rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      auto at = [&](const std::vector<int64_t>& d) {
        return (d[0] == 1 ? 0 : r) * d[1] + (d[1] == 1 ? 0 : j);
      };
      const double cv = c ? beta * element(c->constant(), at(cd)) : 0.0;
      set_element(new_c, r * cols + j, cv + element(bias->constant(), at(*bd)));
    }
  }
  gemm.set_input(2, rw.new_constant(y->name() + "_bias", std::move(new_c)));
  gemm.set_attribute("beta", ir::Attribute(1.0f));
  rw.touch(gemm);
  y->set_type(add->output(0)->type());
  rw.replace(add->output(0), y, {add});
  return true;
}

// com.microsoft MatMulNBits -> Add(constant along the last dim): the constant becomes its bias
// input (onnxruntime's quantizer and `kiln quantize --int4` leave the Add, as exporters write it).
bool fold_nbits_bias(Rewriter& rw, ir::Node& mm) {
  ir::Value* y = mm.output(0);
  ir::Value* bias = nullptr;
  ir::Node* add = mm.input(5) ? nullptr : constant_add(rw, y, &bias);
  const std::optional<size_t> ry = rank_of(y);
  const ir::Attribute* na = mm.attribute("N");
  if (!add || !ry || !na || !std::holds_alternative<int64_t>(na->storage())) return false;
  const int64_t n = std::get<int64_t>(na->storage());
  std::optional<std::vector<int64_t>> bd = aligned_dims(bias->constant(), *ry);
  if (!bd || (bd->back() != 1 && bd->back() != n)) return false;
  for (size_t i = 0; i + 1 < bd->size(); ++i) {
    if ((*bd)[i] != 1) return false;
  }
  Tensor vec(bias->constant().dtype(), {n});
  for (int64_t j = 0; j < n; ++j) {
    set_element(vec, j, element(bias->constant(), bd->back() == 1 ? 0 : j));
  }
  mm.set_input(5, rw.new_constant(bias->name() + "_vector", std::move(vec)));
  rw.touch(mm);
  y->set_type(add->output(0)->type());
  rw.replace(add->output(0), y, {add});
  return true;
}

// Replaces `node` (and the nodes of `dead` after it) by one ai.kiln `fused_op` node with
// `inputs`, node's attributes and `act`, whose result replaces `result`.
void emit_fused(Rewriter& rw, ir::Node& node, const char* fused_op, std::vector<ir::Value*> inputs,
                const ops::FusedActivation& act, ir::Value* result, std::vector<ir::Node*> dead) {
  ir::Graph& g = rw.graph();
  const int opset = import_kiln_domain(g);
  ir::Value* out = rw.new_value(result->name() + "_fused", result->type());
  ir::Node* fused =
      rw.insert_node(dead.front(), fused_op, ops::kKilnDomain, std::move(inputs), {out}, opset);
  for (const auto& [name, a] : node.attributes()) {
    if (name != "activation" && name != "activation_params") fused->set_attribute(name, a);
  }
  act.set_on(*fused);
  rw.replace(result, out, dead);
}

// Conv / Gemm / MatMul, or a fused node without an activation yet, followed by an activation.
bool fuse_activation(Rewriter& rw, ir::Node& node, const char* fused_op) {
  std::optional<ActivationMatch> m = match_activation(rw, node.output(0));
  if (!m) return false;
  std::vector<ir::Node*> dead = m->nodes;
  dead.push_back(&node);
  emit_fused(rw, node, fused_op, node.inputs(), m->activation, m->output, dead);
  return true;
}

// MatMul -> Add(constant bias along the last dim) [-> activation] becomes FusedMatMul.
bool fuse_matmul_bias(Rewriter& rw, ir::Node& mm) {
  ir::Value* y = mm.output(0);
  ir::Value* bias = nullptr;
  ir::Node* add = constant_add(rw, y, &bias);
  const std::optional<size_t> ra = rank_of(mm.input(0)), rb = rank_of(mm.input(1));
  if (!add || !ra || !rb || *ra < 2 || *rb < 2) return false;
  const Dim& n_dim = mm.input(1)->type().shape->dims().back();
  if (!n_dim.is_static()) return false;
  const int64_t n = n_dim.value();
  std::optional<std::vector<int64_t>> bd = aligned_dims(bias->constant(), std::max(*ra, *rb));
  if (!bd) return false;
  for (size_t i = 0; i + 1 < bd->size(); ++i) {
    if ((*bd)[i] != 1) return false;
  }
  if (bd->back() != 1 && bd->back() != n) return false;
  Tensor vec(bias->constant().dtype(), {n});
  for (int64_t j = 0; j < n; ++j) {
    set_element(vec, j, element(bias->constant(), bd->back() == 1 ? 0 : j));
  }
  ir::Value* bias_vec = rw.new_constant(bias->name() + "_vector", std::move(vec));
  ir::Value* result = add->output(0);
  std::vector<ir::Node*> dead = {add, &mm};
  ops::FusedActivation act;
  if (std::optional<ActivationMatch> m = match_activation(rw, result)) {
    act = m->activation;
    result = m->output;
    dead.insert(dead.begin(), m->nodes.begin(), m->nodes.end());
  }
  emit_fused(rw, mm, "FusedMatMul", {mm.input(0), mm.input(1), bias_vec}, act, result, dead);
  return true;
}

bool has_no_activation(const ir::Node& n) {
  const ir::Attribute* a = n.attribute("activation");
  return !a || (std::holds_alternative<std::string>(a->storage()) &&
                std::get<std::string>(a->storage()) == "None");
}

bool fuse(Rewriter& rw, ir::Node& n) {
  if (!is_float_value(n.output(0)) || n.outputs().size() != 1) return false;
  if (is_op(&n, "Conv")) return fold_conv_bias(rw, n) || fuse_activation(rw, n, "FusedConv");
  if (is_op(&n, "Gemm")) return fold_gemm_bias(rw, n) || fuse_activation(rw, n, "FusedGemm");
  if (is_op(&n, "MatMul")) {
    return fuse_matmul_bias(rw, n) || fuse_activation(rw, n, "FusedMatMul");
  }
  // INT4 MatMulNBits: the bias Add joins its bias input, the activation after it fuses.
  if (n.domain() == "com.microsoft" && n.op_type() == "MatMulNBits") {
    return fold_nbits_bias(rw, n) || fuse_activation(rw, n, "FusedMatMulNBits");
  }
  if (n.domain() == ops::kKilnDomain && has_no_activation(n) &&
      (n.op_type() == "FusedConv" || n.op_type() == "FusedGemm" || n.op_type() == "FusedMatMul")) {
    return fuse_activation(rw, n, n.op_type().c_str());
  }
  return false;
}

}  // namespace

bool FuseBiasActivation::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
