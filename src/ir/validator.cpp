#include <set>

#include "ir/graph.hpp"

namespace kiln::ir {
namespace {

void validate(const Graph& g, std::set<const Value*>& visible) {
  std::set<const Value*> local;
  auto define = [&](const Value* v, const std::string& where) {
    KILN_CHECK_ARG(v->owner() == &g, "graph '{}': {} defines '{}' owned by another graph", g.name(),
                   where, v->name());
    KILN_CHECK_ARG(local.insert(v).second, "graph '{}': '{}' is defined twice ({})", g.name(),
                   v->name(), where);
    visible.insert(v);
  };
  for (const Value* v : g.inputs()) {
    define(v, "graph input");
  }
  for (const Value* v : g.initializers()) {
    KILN_CHECK_ARG(v->is_constant(), "graph '{}': initializer '{}' has no data", g.name(),
                   v->name());
    if (!local.count(v)) define(v, "initializer");
  }
  for (const Node* n : g.nodes()) {
    for (const Value* in : n->inputs()) {
      if (!in) continue;
      KILN_CHECK_ARG(visible.count(in), "node {}: input '{}' is used before it is defined",
                     n->label(), in->name());
    }
    for (const auto& [name, a] : n->attributes()) {
      if (auto* sg = std::get_if<GraphPtr>(&a.storage())) {
        KILN_CHECK_ARG(*sg && (*sg)->parent() == &g,
                       "node {}: subgraph '{}' is not nested in graph '{}'", n->label(), name,
                       g.name());
        std::set<const Value*> inner = visible;
        validate(**sg, inner);
      }
    }
    for (const Value* out : n->outputs()) {
      if (!out) continue;
      KILN_CHECK_ARG(out->producer() == n, "node {}: output '{}' names another producer",
                     n->label(), out->name());
      define(out, "node " + n->label());
    }
  }
  for (const Value* out : g.outputs()) {
    KILN_CHECK_ARG(out && visible.count(out), "graph '{}': output '{}' is never defined", g.name(),
                   out ? out->name() : "<null>");
  }
}

}  // namespace

void validate_graph(const Graph& graph) {
  std::set<const Value*> visible;
  // A subgraph validated on its own may capture values of its enclosing graphs.
  for (const Graph* p = graph.parent(); p; p = p->parent()) {
    for (const auto& v : p->values()) visible.insert(v.get());
  }
  validate(graph, visible);
}

}  // namespace kiln::ir
