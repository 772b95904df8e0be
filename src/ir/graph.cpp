#include "ir/graph.hpp"

#include <fmt/format.h>

namespace kiln::ir {

std::string_view attr_kind_name(AttrKind kind) {
  static constexpr std::string_view names[] = {"float",   "int",     "string", "tensor",
                                               "graph",   "type",    "floats", "ints",
                                               "strings", "tensors", "graphs"};
  return names[static_cast<size_t>(kind)];
}

void Node::set_input(size_t i, Value* v) {
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  inputs_[i] = v;
}

const Attribute* Node::attribute(const std::string& name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? nullptr : &it->second;
}

std::string Node::label() const {
  if (!name_.empty()) return fmt::format("{} '{}'", op_type_, name_);
  return fmt::format("{} #{}", op_type_, index_);
}

Value* Graph::add_value(const std::string& name, TypeInfo type) {
  KILN_CHECK_ARG(!name.empty(), "graph '{}': a value needs a name", name_);
  KILN_CHECK_ARG(!by_name_.count(name), "graph '{}': value '{}' is defined more than once", name_,
                 name);
  auto v = std::make_unique<Value>();
  v->name_ = name;
  v->type_ = std::move(type);
  v->owner_ = this;
  Value* raw = v.get();
  values_.push_back(std::move(v));
  by_name_[name] = raw;
  return raw;
}

Value* Graph::add_input(const std::string& name, TypeInfo type) {
  Value* v = add_value(name, std::move(type));
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_initializer(const std::string& name, Tensor data) {
  Value* v = add_value(name, TypeInfo::tensor(data.dtype(), Shape::from_values(data.dims())));
  v->constant_ = std::move(data);
  initializers_.push_back(v);
  return v;
}

Node* Graph::add_node(std::string op_type, std::string domain, std::string name,
                      std::vector<Value*> inputs, std::vector<Value*> outputs) {
  auto n = std::make_unique<Node>();
  n->op_type_ = std::move(op_type);
  n->domain_ = std::move(domain);
  n->name_ = std::move(name);
  n->inputs_ = std::move(inputs);
  n->outputs_ = std::move(outputs);
  n->owner_ = this;
  n->index_ = nodes_.size();
  for (Value* out : n->outputs_) {
    if (!out) continue;
    KILN_CHECK_ARG(out->owner_ == this, "node {}: output '{}' belongs to another graph", n->label(),
                   out->name_);
    KILN_CHECK_ARG(out->producer_ == nullptr && !out->is_constant(),
                   "node {}: output '{}' is already defined", n->label(), out->name_);
    out->producer_ = n.get();
  }
  Node* raw = n.get();
  nodes_.push_back(std::move(n));
  return raw;
}

Value* Graph::find_local_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::find_value(const std::string& name) const {
  for (const Graph* g = this; g; g = g->parent_) {
    if (Value* v = g->find_local_value(name)) return v;
  }
  return nullptr;
}

std::string Graph::unique_name(const std::string& base) {
  std::string name = base;
  while (find_value(name)) name = fmt::format("{}_{}", base, ++name_counter_);
  return name;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

std::map<std::string, size_t> op_histogram(const Graph& graph) {
  std::map<std::string, size_t> counts;
  for (Node* n : graph.nodes()) {
    ++counts[n->domain().empty() ? n->op_type() : n->domain() + "." + n->op_type()];
    for (const auto& [name, attr] : n->attributes()) {
      if (auto* g = std::get_if<GraphPtr>(&attr.storage())) {
        for (auto& [k, c] : op_histogram(**g)) counts[k] += c;
      } else if (auto* gs = std::get_if<std::vector<GraphPtr>>(&attr.storage())) {
        for (const auto& sub : *gs) {
          for (auto& [k, c] : op_histogram(*sub)) counts[k] += c;
        }
      }
    }
  }
  return counts;
}

}  // namespace kiln::ir
