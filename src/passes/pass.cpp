#include "passes/pass.hpp"

namespace kiln::passes {

bool apply_recursively(ir::Graph& graph, const std::function<bool(ir::Graph&)>& fn) {
  bool changed = false;
  for (ir::Node* n : graph.nodes()) {
    for (ir::Graph* s : ir::subgraphs_of(*n)) changed |= apply_recursively(*s, fn);
  }
  changed |= fn(graph);
  return changed;
}

}  // namespace kiln::passes
