#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {
namespace {

bool static_shape_equal(const ir::Value* a, const ir::Value* b) {
  const TypeInfo& ta = a->type();
  const TypeInfo& tb = b->type();
  return ta.is_tensor() && tb.is_tensor() && ta.shape && tb.shape && ta.shape->is_static() &&
         ta.shape == tb.shape;
}

bool constant_false(const ir::Value* v) {
  return !v || (v->is_constant() && v->constant().numel() == 1 && v->constant().int_at(0) == 0);
}

// True when the node's output 0 always equals its input 0.
bool passes_through(const ir::Node& n,
                    const std::map<const ir::Value*, std::vector<ir::Node*>>& uses,
                    const ir::Graph& g) {
  const std::string& op = n.op_type();
  if (!n.domain().empty() || !n.input(0) || !n.output(0)) return false;
  if (op == "Identity") return true;
  if (op == "Dropout") {
    const ir::Value* mask = n.output(1);
    bool mask_unused = !mask || (!g.is_output(mask) && !uses.count(mask));
    const ir::Attribute* is_test = n.attribute("is_test");  // opset < 7
    bool inference =
        n.opset() >= 12 ? constant_false(n.input(2))
                        : n.opset() >= 7 || (is_test && std::get<int64_t>(is_test->storage()) != 0);
    return mask_unused && inference;
  }
  if (op == "Cast") {
    const ir::Attribute* to = n.attribute("to");
    const TypeInfo& t = n.input(0)->type();
    return to && t.is_tensor() && std::holds_alternative<int64_t>(to->storage()) &&
           static_cast<int64_t>(t.dtype) == std::get<int64_t>(to->storage());
  }
  if (op == "Reshape" || op == "Expand" || op == "Squeeze" || op == "Unsqueeze") {
    return static_shape_equal(n.input(0), n.output(0));
  }
  if (op == "Transpose") {
    const ir::Attribute* perm = n.attribute("perm");
    if (!perm || !std::holds_alternative<std::vector<int64_t>>(perm->storage())) return false;
    const auto& p = std::get<std::vector<int64_t>>(perm->storage());
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] != static_cast<int64_t>(i)) return false;
    }
    return true;
  }
  return false;
}

}  // namespace

bool EliminateIdentity::apply(ir::Graph& root) const {
  return apply_recursively(root, [](ir::Graph& g) {
    bool changed = false;
    auto uses = g.compute_uses();
    for (ir::Node* n : g.nodes()) {
      if (!passes_through(*n, uses, g)) continue;
      ir::Value* in = n->input(0);
      ir::Value* out = n->output(0);
      if (!g.replace_uses(out, in)) continue;
      g.remove_node(n);
      // The readers of `out` now read `in`; n no longer does. Updated in place rather than
      // recomputed, which would make the pass quadratic in the node count.
      auto moved = uses.find(out);
      std::vector<ir::Node*>& readers = uses[in];
      std::erase(readers, n);
      if (moved != uses.end()) {
        readers.insert(readers.end(), moved->second.begin(), moved->second.end());
        uses.erase(moved);
      }
      changed = true;
    }
    return changed;
  });
}

}  // namespace kiln::passes
