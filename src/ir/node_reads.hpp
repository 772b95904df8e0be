#pragma once
// Every value a node reads: its inputs plus, through its subgraphs (If/Loop/Scan bodies, at any
// depth), the values those subgraphs read and return. Liveness, the interpreter's release plan,
// drift search and the profiler all need this same set, so it is defined once here.

#include <variant>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::ir {

// Calls `visit(const Value*)` for each value read, in reading order, repeats included.
template <typename Visit>
void visit_reads(const Node& n, Visit&& visit) {
  for (const Value* v : n.inputs()) {
    if (v) visit(v);
  }
  for (const auto& entry : n.attributes()) {
    const auto& storage = entry.second.storage();
    std::vector<const Graph*> subgraphs;
    if (auto* g = std::get_if<GraphPtr>(&storage)) subgraphs.push_back(g->get());
    if (auto* gs = std::get_if<std::vector<GraphPtr>>(&storage)) {
      for (const auto& g : *gs) subgraphs.push_back(g.get());
    }
    for (const Graph* g : subgraphs) {
      for (const Node* inner : g->nodes()) visit_reads(*inner, visit);
      for (const Value* v : g->outputs()) visit(v);
    }
  }
}

}  // namespace kiln::ir
