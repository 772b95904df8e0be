#pragma once
// Every value a node reads: its inputs plus, through its subgraphs (If/Loop/Scan bodies, at any
// depth), the values those subgraphs read and return. Liveness, the interpreter's release plan,
// drift search and the profiler all need this same set, so it is defined once here.

#include "ir/graph.hpp"

namespace kiln::ir {

// Calls `visit(const Value*)` for each value read, in reading order, repeats included.
template <typename Visit>
void visit_reads(const Node& n, Visit&& visit) {
  for (const Value* v : n.inputs()) {
    if (v) visit(v);
  }
  for (const Graph* g : subgraphs_of(n)) {
    for (const Node* inner : g->nodes()) visit_reads(*inner, visit);
    for (const Value* v : g->outputs()) visit(v);
  }
}

}  // namespace kiln::ir
