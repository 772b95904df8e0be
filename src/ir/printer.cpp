#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/graph.hpp"

namespace kiln::ir {
namespace {

std::string value_ref(const Value* v) {
  return v ? "%" + v->name() : "<none>";
}

void print_into(const Graph& g, int indent, std::string& out);

std::string short_list(const auto& xs) {
  constexpr size_t kMax = 8;
  std::string s = "[";
  for (size_t i = 0; i < xs.size() && i < kMax; ++i) s += fmt::format("{}{}", i ? "," : "", xs[i]);
  if (xs.size() > kMax) s += fmt::format(",...({} total)", xs.size());
  return s + "]";
}

}  // namespace

std::string Attribute::to_string() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, int64_t>) {
          return fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return fmt::format("\"{}\"", v);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          return "tensor " + v.describe();
        } else if constexpr (std::is_same_v<T, GraphPtr>) {
          return "graph " + (v ? v->name() : std::string("null"));
        } else if constexpr (std::is_same_v<T, TypeInfo>) {
          return "type " + v.to_string();
        } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
          return fmt::format("{} tensors", v.size());
        } else if constexpr (std::is_same_v<T, std::vector<GraphPtr>>) {
          return fmt::format("{} graphs", v.size());
        } else {
          return short_list(v);
        }
      },
      value_);
}

namespace {

void print_into(const Graph& g, int indent, std::string& out) {
  std::string pad(static_cast<size_t>(indent), ' ');
  out += fmt::format("{}graph {} (\n", pad, g.name());
  for (const Value* v : g.inputs())
    out += fmt::format("{}  in  %{}: {}\n", pad, v->name(), v->type().to_string());
  for (const Value* v : g.initializers())
    out += fmt::format("{}  init %{}: {}\n", pad, v->name(), v->type().to_string());
  out += pad + ") {\n";
  for (const Node* n : g.nodes()) {
    std::vector<std::string> outs, ins;
    for (const Value* v : n->outputs()) outs.push_back(value_ref(v));
    for (const Value* v : n->inputs()) ins.push_back(value_ref(v));
    std::string attrs;
    std::vector<const Graph*> subgraphs;
    for (const auto& [name, a] : n->attributes()) {
      attrs += fmt::format("{}{}={}", attrs.empty() ? " {" : ", ", name, a.to_string());
      if (auto* sg = std::get_if<GraphPtr>(&a.storage())) subgraphs.push_back(sg->get());
    }
    if (!attrs.empty()) attrs += "}";
    std::string dom = n->domain().empty() ? "" : n->domain() + ".";
    out += fmt::format("{}  {} = {}{}({}){}\n", pad, fmt::join(outs, ", "), dom, n->op_type(),
                       fmt::join(ins, ", "), attrs);
    for (const Graph* sg : subgraphs) print_into(*sg, indent + 4, out);
  }
  std::vector<std::string> outs;
  for (const Value* v : g.outputs()) outs.push_back(value_ref(v) + ": " + v->type().to_string());
  out += fmt::format("{}  return {}\n{}}}\n", pad, fmt::join(outs, ", "), pad);
}

}  // namespace

std::string print_graph(const Graph& graph) {
  std::string out;
  print_into(graph, 0, out);
  return out;
}

}  // namespace kiln::ir
