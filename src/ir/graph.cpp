#include "ir/graph.hpp"

#include <algorithm>

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

Node* Graph::insert_node_before(const Node* position, std::string op_type, std::string domain,
                                std::string name, std::vector<Value*> inputs,
                                std::vector<Value*> outputs) {
  Node* n = add_node(std::move(op_type), std::move(domain), std::move(name), std::move(inputs),
                     std::move(outputs));
  auto pos = std::find_if(nodes_.begin(), nodes_.end(),
                          [&](const std::unique_ptr<Node>& p) { return p.get() == position; });
  KILN_CHECK(pos != nodes_.end(), ErrorCode::Internal, "insert_node_before: node not in graph '{}'",
             name_);
  std::rotate(pos, nodes_.end() - 1, nodes_.end());
  return n;
}

void Graph::remove_node(Node* node) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(),
                         [&](const std::unique_ptr<Node>& p) { return p.get() == node; });
  KILN_CHECK(it != nodes_.end(), ErrorCode::Internal, "remove_node: node not in graph '{}'", name_);
  std::vector<Value*> outs = node->outputs_;
  nodes_.erase(it);
  for (Value* v : outs) {
    if (v) remove_value(v);
  }
}

void Graph::replace_node_with_constants(Node* node, std::vector<Tensor> values) {
  KILN_CHECK(values.size() == node->outputs_.size(), ErrorCode::Internal,
             "replace_node_with_constants: {} values for {} outputs of {}", values.size(),
             node->outputs_.size(), node->label());
  std::vector<Value*> outs = node->outputs_;
  node->outputs_.clear();
  remove_node(node);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i]) continue;
    outs[i]->producer_ = nullptr;
    outs[i]->type_ = TypeInfo::tensor(values[i].dtype(), Shape::from_values(values[i].dims()));
    outs[i]->constant_ = std::move(values[i]);
    initializers_.push_back(outs[i]);
  }
}

void Graph::remove_value(Value* value) {
  KILN_CHECK(!is_output(value), ErrorCode::Internal, "remove_value: '{}' is a graph output",
             value->name());
  std::erase(initializers_, value);
  std::erase(inputs_, value);
  by_name_.erase(value->name_);
  std::erase_if(values_, [&](const std::unique_ptr<Value>& p) { return p.get() == value; });
}

void Graph::rename_value(Value* value, const std::string& name) {
  KILN_CHECK_ARG(!by_name_.count(name), "graph '{}': value '{}' already exists", name_, name);
  by_name_.erase(value->name_);
  value->name_ = name;
  by_name_[name] = value;
}

bool Graph::is_input(const Value* v) const {
  return std::find(inputs_.begin(), inputs_.end(), v) != inputs_.end();
}

bool Graph::is_output(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

std::vector<Graph*> subgraphs_of(const Node& node) {
  std::vector<Graph*> out;
  for (const auto& entry : node.attributes()) {
    const auto& storage = entry.second.storage();
    if (auto* g = std::get_if<GraphPtr>(&storage)) out.push_back(g->get());
    if (auto* gs = std::get_if<std::vector<GraphPtr>>(&storage)) {
      for (const auto& g : *gs) out.push_back(g.get());
    }
  }
  return out;
}

namespace {
void replace_reads(const Graph& g, Value* from, Value* to) {
  for (Node* n : g.nodes()) {
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      if (n->input(i) == from) n->set_input(i, to);
    }
    for (const Graph* s : subgraphs_of(*n)) replace_reads(*s, from, to);
  }
}
}  // namespace

bool Graph::replace_uses(Value* from, Value* to) {
  if (is_output(from)) {
    if (to->owner_ != this || !to->producer_ || is_output(to)) return false;
    std::string name = from->name_;
    rename_value(from, unique_name(name + "_replaced"));
    rename_value(to, name);
    std::replace(outputs_.begin(), outputs_.end(), from, to);
  }
  replace_reads(*this, from, to);
  // Subgraph outputs may name the value directly.
  for (Node* n : nodes()) {
    for (const auto& [name, a] : n->attributes()) {
      if (auto* sg = std::get_if<GraphPtr>(&a.storage())) {
        std::replace((*sg)->outputs_.begin(), (*sg)->outputs_.end(), from, to);
      }
    }
  }
  return true;
}

namespace {
void collect_uses(const Graph& g, Node* holder, std::map<const Value*, std::vector<Node*>>& uses) {
  for (Node* n : g.nodes()) {
    Node* reader = holder ? holder : n;
    for (const Value* v : n->inputs()) {
      if (v) uses[v].push_back(reader);
    }
    for (const Graph* s : subgraphs_of(*n)) {
      collect_uses(*s, reader, uses);
      for (const Value* v : s->outputs()) uses[v].push_back(reader);
    }
  }
}
}  // namespace

std::map<const Value*, std::vector<Node*>> Graph::compute_uses() const {
  std::map<const Value*, std::vector<Node*>> uses;
  collect_uses(*this, nullptr, uses);
  return uses;
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
