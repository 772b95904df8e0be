#include "passes/pass.hpp"

namespace kiln::passes {

bool apply_recursively(ir::Graph& graph, const std::function<bool(ir::Graph&)>& fn) {
  bool changed = false;
  for (ir::Node* n : graph.nodes()) {
    for (const auto& [name, a] : n->attributes()) {
      if (auto* g = std::get_if<ir::GraphPtr>(&a.storage())) changed |= apply_recursively(**g, fn);
      if (auto* gs = std::get_if<std::vector<ir::GraphPtr>>(&a.storage())) {
        for (const auto& s : *gs) changed |= apply_recursively(*s, fn);
      }
    }
  }
  changed |= fn(graph);
  return changed;
}

}  // namespace kiln::passes
