#include "cli/graph_dot.hpp"

#include <unordered_map>

#include <fmt/format.h>

namespace kiln::cli {
namespace {

// Text inside a DOT double-quoted string; "\n" in the result is DOT's line break.
std::string quote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string graph_to_dot(const ir::Graph& g) {
  std::string dot = fmt::format("digraph \"{}\" {{\n", quote(g.name()));
  dot +=
      "  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f6e3c7\", "
      "fontname=\"Helvetica\", fontsize=11];\n  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::unordered_map<const ir::Value*, std::string> source;  // value -> DOT id that makes it
  size_t k = 0;
  for (const ir::Value* v : g.inputs()) {
    if (v->is_constant()) continue;
    std::string id = fmt::format("in{}", k++);
    source[v] = id;
    dot += fmt::format("  {} [shape=ellipse, fillcolor=\"#cfe3f5\", label=\"{}\\n{}\"];\n", id,
                       quote(v->name()), quote(v->type().to_string()));
  }
  size_t i = 0;
  for (const ir::Node* n : g.nodes()) {
    std::string id = fmt::format("n{}", i++);
    std::string label = n->domain().empty() ? n->op_type() : n->domain() + "." + n->op_type();
    if (!n->name().empty()) label += "\n" + n->name();
    for (const ir::Value* v : n->inputs()) {
      if (v && v->is_constant())
        label += fmt::format("\n{} {}", v->name(), v->constant().describe());
    }
    size_t subgraphs = 0;
    for (const auto& [name, a] : n->attributes()) {
      if (std::holds_alternative<ir::GraphPtr>(a.storage())) ++subgraphs;
      if (auto* gs = std::get_if<std::vector<ir::GraphPtr>>(&a.storage())) subgraphs += gs->size();
    }
    if (subgraphs) label += fmt::format("\n({} subgraph{})", subgraphs, subgraphs > 1 ? "s" : "");
    dot += fmt::format("  {} [label=\"{}\"];\n", id, quote(label));
    for (const ir::Value* v : n->inputs()) {
      if (!v || v->is_constant()) continue;
      auto it = source.find(v);
      if (it == source.end()) continue;  // captured from an enclosing graph
      dot +=
          fmt::format("  {} -> {} [label=\"{}\"];\n", it->second, id, quote(v->type().to_string()));
    }
    for (const ir::Value* v : n->outputs()) {
      if (v) source[v] = id;
    }
  }
  k = 0;
  for (const ir::Value* v : g.outputs()) {
    std::string id = fmt::format("out{}", k++);
    dot += fmt::format("  {} [shape=ellipse, fillcolor=\"#d5efcf\", label=\"{}\\n{}\"];\n", id,
                       quote(v->name()), quote(v->type().to_string()));
    auto it = source.find(v);
    if (it != source.end()) dot += fmt::format("  {} -> {};\n", it->second, id);
  }
  return dot + "}\n";
}

}  // namespace kiln::cli
