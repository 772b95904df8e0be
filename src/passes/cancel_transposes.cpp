#include <numeric>

#include "ops/op_traits.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

bool is_identity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Transpose(Transpose(x, first), second) == Transpose(x, composed).
std::vector<int64_t> compose(const std::vector<int64_t>& first,
                             const std::vector<int64_t>& second) {
  std::vector<int64_t> q(second.size());
  for (size_t i = 0; i < second.size(); ++i) q[i] = first[static_cast<size_t>(second[i])];
  return q;
}

// Ops that map each element on its own, so they commute with any Transpose (their traits say
// so): unary element-wise ops (extra inputs, Clip's bounds, must be scalar constants), and binary
// ones whose other operand is a constant scalar.
bool is_elementwise(const ir::Node& n, const ir::Value* v) {
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  if (n.outputs().size() != 1 || !n.output(0) || n.input(0) != v) return false;
  const ops::OpTraits& traits = ops::traits_of(n);
  if (!traits.transposes) return false;
  if (traits.pointwise == ops::Pointwise::Binary || traits.pointwise == ops::Pointwise::Variadic) {
    if (n.inputs().size() != 2) return false;
    // A scalar of rank 0 (not [1], which could raise a rank-0 operand's rank).
    const ir::Value* c = n.input(1);
    return c != v && c->is_constant() && c->constant().rank() == 0;
  }
  for (size_t i = 1; i < n.inputs().size(); ++i) {
    if (n.input(i) && (n.input(i) == v || !scalar_constant(n.input(i)))) return false;
  }
  return true;
}

// Transpose(Transpose(x, p1), p2) -> Transpose(x, p1 o p2), or x when that is the identity.
bool compose_pair(Rewriter& rw, ir::Node& outer) {
  ir::Value* mid = outer.input(0);
  ir::Node* inner = rw.producer(mid, "Transpose");
  if (!inner || rw.touched(mid)) return false;
  std::optional<std::vector<int64_t>> p1 = perm_of(*inner), p2 = perm_of(outer);
  if (!p1 || !p2 || p1->size() != p2->size()) return false;
  std::vector<int64_t> q = compose(*p1, *p2);
  ir::Value* x = inner->input(0);
  const bool inner_dead = rw.single_use(mid);
  if (is_identity(q)) {
    if (!rw.can_replace(outer.output(0), x)) return false;
    std::vector<ir::Node*> dead = {&outer};
    if (inner_dead) dead.push_back(inner);
    rw.replace(outer.output(0), x, dead);
    return true;
  }
  outer.set_input(0, x);
  outer.set_attribute("perm", ir::Attribute(q));
  rw.touch(outer);
  if (inner_dead) rw.remove(inner);
  return true;
}

// Transpose(x, p1) -> e1 -> ... -> en -> Transpose(., p2), every link read once: the element-wise
// ops run on x, and the Transposes compose (and vanish when they cancel).
bool sink_through_elementwise(Rewriter& rw, ir::Node& first) {
  ir::Value* cur = first.output(0);
  std::vector<ir::Node*> chain;
  ir::Node* second = nullptr;
  while (rw.single_use(cur)) {
    ir::Node* r = rw.readers(cur)[0];
    if (is_op(r, "Transpose") && r->input(0) == cur) {
      second = r;
      break;
    }
    if (!is_elementwise(*r, cur)) break;
    chain.push_back(r);
    cur = r->output(0);
  }
  if (!second || chain.empty()) return false;
  std::optional<std::vector<int64_t>> p1 = perm_of(first), p2 = perm_of(*second);
  if (!p1 || !p2 || p1->size() != p2->size()) return false;
  ir::Value* x = first.input(0);
  const std::vector<int64_t> q = compose(*p1, *p2);
  for (ir::Node* n : chain) {
    ir::Value* out = n->output(0);
    out->set_type(TypeInfo::tensor(out->type().dtype, x->type().shape));
    rw.touch(*n);
  }
  chain.front()->set_input(0, x);
  if (is_identity(q)) {
    rw.replace(second->output(0), cur, {second});
  } else {
    second->set_attribute("perm", ir::Attribute(q));
    rw.touch(*second);
  }
  rw.remove(&first);
  return true;
}

bool rewrite(Rewriter& rw, ir::Node& n) {
  if (!is_op(&n, "Transpose") || n.outputs().size() != 1) return false;
  return compose_pair(rw, n) || sink_through_elementwise(rw, n);
}

}  // namespace

bool CancelTransposes::apply(ir::Graph& root) const {
  return rewrite_graph(root, rewrite);
}

}  // namespace kiln::passes
