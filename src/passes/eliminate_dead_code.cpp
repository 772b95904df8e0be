#include <algorithm>

#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {

bool EliminateDeadCode::apply(ir::Graph& root) const {
  return apply_recursively(root, [](ir::Graph& g) {
    auto uses = g.compute_uses();
    auto unused = [&](const ir::Value* v) {
      if (!v || g.is_output(v)) return !v;
      auto it = uses.find(v);
      return it == uses.end() || it->second.empty();
    };
    bool changed = false;
    // Reverse order: removing a reader can make its producers dead in the same sweep.
    std::vector<ir::Node*> nodes = g.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      ir::Node* n = *it;
      if (!std::all_of(n->outputs().begin(), n->outputs().end(), unused)) continue;
      for (auto& [v, readers] : uses) {
        std::erase(readers, n);
      }
      g.remove_node(n);
      changed = true;
    }
    std::vector<ir::Value*> inits = g.initializers();
    for (ir::Value* v : inits) {
      bool is_input = std::find(g.inputs().begin(), g.inputs().end(), v) != g.inputs().end();
      if (!is_input && unused(v)) {
        g.remove_value(v);
        changed = true;
      }
    }
    return changed;
  });
}

}  // namespace kiln::passes
