#include <algorithm>
#include <set>

#include "passes/pass.hpp"
#include "passes/passes.hpp"
#include "passes/shape_folding.hpp"

namespace kiln::passes {
namespace {

bool has_subgraph(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (a.kind() == ir::AttrKind::Graph || a.kind() == ir::AttrKind::Graphs) return true;
  }
  return false;
}

}  // namespace

bool is_nondeterministic(const ir::Node& n) {
  static const std::set<std::string> kRandomOps = {"RandomNormal",  "RandomNormalLike",
                                                   "RandomUniform", "RandomUniformLike",
                                                   "Bernoulli",     "Multinomial"};
  if (n.domain().empty() && kRandomOps.count(n.op_type())) return true;
  return n.op_type() == "Dropout" && n.input(2) && !n.input(2)->is_constant();
}

bool FoldConstants::apply(ir::Graph& root) const {
  size_t limit = max_bytes;
  return apply_recursively(root, [limit](ir::Graph& g) {
    bool changed = false;
    for (ir::Node* n : g.nodes()) {
      if (is_nondeterministic(*n) || has_subgraph(*n)) continue;
      if (auto t = fold_shape_value(*n)) {
        g.replace_node_with_constants(n, {std::move(*t)});
        changed = true;
        continue;
      }
      if (auto shape = reshape_target_from_dims(*n)) {
        n->set_input(
            1, g.add_initializer(g.unique_name(n->input(1)->name() + "_dims"), std::move(*shape)));
        changed = true;
        continue;
      }
      // A node without inputs is constant only when it is a Constant (random generators and
      // sequence constructors have none either).
      bool all_constant = !n->inputs().empty() || n->op_type() == "Constant";
      for (const ir::Value* v : n->inputs()) all_constant &= !v || v->is_constant();
      if (!all_constant) continue;
      std::vector<RtValue> inputs;
      inputs.reserve(n->inputs().size());
      for (const ir::Value* v : n->inputs())
        inputs.push_back(v ? RtValue(v->constant()) : RtValue());
      std::optional<std::vector<RtValue>> evaluated = evaluate_node(*n, inputs);
      if (!evaluated) continue;
      std::vector<RtValue>& outputs = *evaluated;
      std::vector<Tensor> values;
      size_t bytes = 0;
      bool foldable = true;
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (!n->output(i)) {
          values.emplace_back();
          continue;
        }
        foldable &= outputs[i].is_tensor();
        if (!foldable) break;
        bytes += outputs[i].tensor().nbytes();
        values.push_back(outputs[i].tensor());
      }
      if (!foldable || bytes > limit) continue;
      g.replace_node_with_constants(n, std::move(values));
      changed = true;
    }
    return changed;
  });
}

}  // namespace kiln::passes
