#include <algorithm>
#include <numeric>

#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// A Mul or Div of `v` by a constant scalar: the factor it applies (nullopt when it is not one).
std::optional<double> scale_factor(const ir::Node& n, const ir::Value* v) {
  if (n.inputs().size() != 2) return std::nullopt;
  if (is_op(&n, "Div") && n.input(0) == v) {
    std::optional<double> c = scalar_constant(n.input(1));
    if (c && *c != 0) return 1 / *c;
  }
  if (is_op(&n, "Mul")) {
    const ir::Value* c = other_input(n, v);
    if (c && c != v) return scalar_constant(c);
  }
  return std::nullopt;
}

// When `v` is Mul/Div(x, constant) read only once: x, the factor, and the node.
ir::Value* unscaled(const Rewriter& rw, ir::Value* v, double& factor,
                    std::vector<ir::Node*>& dead) {
  ir::Node* n = rw.producer(v);
  if (!n || !rw.single_use(v) || (!is_op(n, "Mul") && !is_op(n, "Div"))) return v;
  for (int s = 0; s < 2; ++s) {
    if (is_op(n, "Div") && s == 1) break;
    std::optional<double> f = scale_factor(*n, n->input(s));
    if (f) {
      factor *= *f;
      dead.push_back(n);
      return n->input(s);
    }
  }
  return v;
}

// The mask broadcasts over the scores without widening their last two dims (which the fused op
// takes from Q and K).
bool mask_fits(const ir::Value* mask, const ir::Value* scores) {
  const std::optional<Shape>& ms = mask->type().shape;
  const std::optional<Shape>& ss = scores->type().shape;
  if (!ms || !ss || ss->rank() < 2) return false;
  for (size_t i = 1; i <= std::min<size_t>(2, ms->rank()); ++i) {
    const Dim& m = (*ms)[ms->rank() - i];
    if (!(m.is_static() && m.value() == 1) && !same_dim(m, (*ss)[ss->rank() - i])) return false;
  }
  return true;
}

// softmax(Q K^T * scale [+ mask]) V, written as
//   MatMul(Q [* c], KT [* c]) -> [Div|Mul by constant] -> [Add mask] -> Softmax(last axis)
//   [-> Where(IsNaN(P), 0, P)] -> MatMul(., V)
// where KT is K with its last two dims swapped (usually a Transpose), becomes one ai.kiln
// ScaledDotProductAttention(Q, K, V, mask).
bool fuse(Rewriter& rw, ir::Node& out_mm, FuseAttention::NanGuard nan_guard) {
  if (!is_op(&out_mm, "MatMul") || !is_float_value(out_mm.output(0))) return false;
  ir::Value* probs = out_mm.input(0);
  ir::Value* v = out_mm.input(1);
  std::vector<ir::Node*> dead = {&out_mm};
  // torch's export of scaled_dot_product_attention: Where(IsNaN(P), 0, P) between the Softmax
  // and the MatMul (a fully masked row gives 0, not NaN): the op's zero_nan_probs.
  bool zero_nan = false;
  if (ir::Node* where = rw.producer(probs, "Where"); where && rw.single_use(probs)) {
    using enum FuseAttention::NanGuard;
    if (nan_guard == None ||
        (nan_guard == Float16 && out_mm.output(0)->type().dtype != DataType::Float16)) {
      return false;
    }
    ir::Value* p = where->input(2);
    ir::Node* isnan = rw.producer(where->input(0), "IsNaN");
    std::optional<double> zero = scalar_constant(where->input(1));
    if (!isnan || isnan->input(0) != p || !rw.single_use(where->input(0)) || !zero || *zero != 0 ||
        rw.readers(p).size() != 2 || rw.graph().is_output(p)) {
      return false;
    }
    dead.push_back(where);
    dead.push_back(isnan);
    probs = p;
    zero_nan = true;
  }
  ir::Node* softmax = rw.producer(probs, "Softmax");
  if (!softmax || (!zero_nan && !rw.single_use(probs))) return false;
  ir::Value* logits = softmax->input(0);
  const std::optional<size_t> rank = rank_of(logits);
  if (!rank || *rank < 2 || !rw.single_use(logits)) return false;
  int64_t axis = int_attr(*softmax, "axis", softmax->opset() >= 13 ? -1 : 1);
  if (axis < 0) axis += static_cast<int64_t>(*rank);
  if (axis != static_cast<int64_t>(*rank) - 1) return false;

  dead.push_back(softmax);
  double scale = 1;
  ir::Value* mask = nullptr;
  ir::Value* scores = logits;
  if (ir::Node* add = rw.producer(logits, "Add")) {
    // The scores are the operand that leads (through at most one scaling) to a MatMul.
    for (int s = 0; s < 2 && !mask; ++s) {
      double unused = 1;
      std::vector<ir::Node*> ignored;
      ir::Value* side = add->input(s);
      if (side != add->input(1 - s) && rw.single_use(side) &&
          rw.producer(unscaled(rw, side, unused, ignored), "MatMul")) {
        scores = side;
        mask = add->input(1 - s);
      }
    }
    if (!mask) return false;
    dead.push_back(add);
  }
  if (mask && !mask_fits(mask, scores)) return false;
  scores = unscaled(rw, scores, scale, dead);
  ir::Node* qk = rw.producer(scores, "MatMul");
  if (!qk || !rw.single_use(scores)) return false;
  dead.push_back(qk);
  ir::Value* q = unscaled(rw, qk->input(0), scale, dead);
  ir::Value* kt = unscaled(rw, qk->input(1), scale, dead);  // torch scales both sides
  const std::optional<size_t> rq = rank_of(q), rk = rank_of(kt), rv = rank_of(v);
  if (!rq || !rk || !rv || *rq < 2 || *rk < 2 || *rv < 2) return false;
  const DataType t = q->type().dtype;
  if (!is_float_value(q) || kt->type().dtype != t || v->type().dtype != t ||
      (mask && (!mask->type().is_tensor() || mask->type().dtype != t))) {
    return false;
  }

  // K = KT with its last two dims swapped: fold the swap into KT's Transpose when there is one.
  ir::Value* k_src = kt;
  std::vector<int64_t> perm(*rk);
  std::iota(perm.begin(), perm.end(), 0);
  ir::Node* kt_transpose = rw.producer(kt, "Transpose");
  std::optional<std::vector<int64_t>> kt_perm =
      kt_transpose ? perm_of(*kt_transpose) : std::nullopt;
  if (kt_perm && kt_perm->size() == *rk && rw.single_use(kt)) {
    k_src = kt_transpose->input(0);
    perm = *kt_perm;
    dead.push_back(kt_transpose);
  }
  std::swap(perm[*rk - 1], perm[*rk - 2]);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);

  ir::Graph& g = rw.graph();
  const int opset = import_kiln_domain(g);
  ir::Value* k = k_src;
  if (!identity) {
    std::optional<Shape> ks;
    if (kt->type().shape) {
      std::vector<Dim> dims = kt->type().shape->dims();
      std::swap(dims[*rk - 1], dims[*rk - 2]);
      ks = Shape(std::move(dims));
    }
    k = rw.new_value(kt->name() + "_k", TypeInfo::tensor(t, ks));
    ir::Node* tr =
        rw.insert_node(&out_mm, "Transpose", "", {k_src}, {k}, std::max(1, imported_opset(g, "")));
    tr->set_attribute("perm", ir::Attribute(perm));
  }
  ir::Value* y = out_mm.output(0);
  ir::Value* out = rw.new_value(y->name() + "_attention", y->type());
  std::vector<ir::Value*> inputs = {q, k, v};
  if (mask) inputs.push_back(mask);
  ir::Node* sdpa = rw.insert_node(&out_mm, "ScaledDotProductAttention", ops::kKilnDomain,
                                  std::move(inputs), {out}, opset);
  sdpa->set_attribute("scale", ir::Attribute(static_cast<float>(scale)));
  if (zero_nan) sdpa->set_attribute("zero_nan_probs", ir::Attribute(int64_t{1}));
  rw.replace(y, out, dead);
  return true;
}

}  // namespace

bool FuseAttention::apply(ir::Graph& root) const {
  return rewrite_graph(root, [this](Rewriter& rw, ir::Node& n) { return fuse(rw, n, nan_guard); });
}

}  // namespace kiln::passes
