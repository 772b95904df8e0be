#pragma once
// The graph IR: SSA values produced by nodes, graph inputs and initializers. A subgraph (an
// If/Loop/Scan body) is a Graph with a parent; its nodes may use values of enclosing graphs,
// which is how ONNX bodies capture outer values.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/type_info.hpp"
#include "ir/attribute.hpp"

namespace kiln::ir {

class Node;
class Graph;

class Value {
 public:
  const std::string& name() const { return name_; }
  const TypeInfo& type() const { return type_; }
  void set_type(TypeInfo type) { type_ = std::move(type); }
  Node* producer() const { return producer_; }
  Graph* owner() const { return owner_; }
  // Initializers carry their data; everything else is computed at run time.
  bool is_constant() const { return constant_.defined(); }
  const Tensor& constant() const { return constant_; }
  void set_constant(Tensor t) { constant_ = std::move(t); }

 private:
  friend class Graph;
  std::string name_;
  TypeInfo type_;
  Node* producer_ = nullptr;
  Graph* owner_ = nullptr;
  Tensor constant_;
};

class Node {
 public:
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }  // "" is the default ONNX domain
  const std::string& name() const { return name_; }
  int opset() const { return opset_; }  // version of domain() the model imports
  void set_opset(int v) { opset_ = v; }
  // Missing optional inputs/outputs are nullptr.
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  void set_input(size_t i, Value* v);

  const std::map<std::string, Attribute>& attributes() const { return attrs_; }
  const Attribute* attribute(const std::string& name) const;
  void set_attribute(const std::string& name, Attribute a) { attrs_[name] = std::move(a); }
  void remove_attribute(const std::string& name) { attrs_.erase(name); }
  Graph* owner() const { return owner_; }
  // "Conv 'conv1'" or "Conv #3" — for error messages.
  std::string label() const;

 private:
  friend class Graph;
  std::string op_type_, domain_, name_;
  int opset_ = 0;
  std::vector<Value*> inputs_, outputs_;
  std::map<std::string, Attribute> attrs_;
  Graph* owner_ = nullptr;
  size_t index_ = 0;
};

class Graph {
 public:
  explicit Graph(std::string name = "main", Graph* parent = nullptr)
      : name_(std::move(name)), parent_(parent) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  Graph* parent() const { return parent_; }
  void set_parent(Graph* parent) { parent_ = parent; }

  // Creates a value owned by this graph. Names are unique within the graph.
  Value* add_value(const std::string& name, TypeInfo type = {});
  Value* add_input(const std::string& name, TypeInfo type);
  Value* add_initializer(const std::string& name, Tensor data);
  void add_output(Value* v) { outputs_.push_back(v); }
  Node* add_node(std::string op_type, std::string domain, std::string name,
                 std::vector<Value*> inputs, std::vector<Value*> outputs);

  // Like add_node, but placed just before `position` in the node order.
  Node* insert_node_before(const Node* position, std::string op_type, std::string domain,
                           std::string name, std::vector<Value*> inputs,
                           std::vector<Value*> outputs);
  // Removes a node and its output values; the caller makes sure nothing reads them any more.
  void remove_node(Node* node);
  // Removes an unused value (an initializer nothing reads, a dead node's output).
  void remove_value(Value* value);
  void rename_value(Value* value, const std::string& name);
  // Constant folding: removes `node` but keeps its outputs, which become initializers holding
  // `values` (one per output slot; optional outputs the node leaves empty are skipped).
  void replace_node_with_constants(Node* node, std::vector<Tensor> values);
  // Makes every reader of `from` (nodes here and in nested subgraphs) read `to`. When `from` is a
  // graph output its name must survive: `to` takes that name if it is a node output of this graph
  // that is not itself a graph output; otherwise nothing changes and this returns false.
  bool replace_uses(Value* from, Value* to);
  // Readers of every value read in this graph; a subgraph's reads count as reads by the node
  // holding it. Graph outputs are not included.
  std::map<const Value*, std::vector<Node*>> compute_uses() const;
  bool is_output(const Value* v) const;
  bool is_input(const Value* v) const;

  // Finds a value by name here, then in enclosing graphs; nullptr when absent.
  Value* find_value(const std::string& name) const;
  Value* find_local_value(const std::string& name) const;
  std::string unique_name(const std::string& base);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  const std::vector<Value*>& initializers() const { return initializers_; }
  // Nodes in topological order (the importer checks it, the validator enforces it).
  std::vector<Node*> nodes() const;
  size_t node_count() const { return nodes_.size(); }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  // Opset version per domain imported by the model ("" = ai.onnx).
  std::map<std::string, int>& opsets() { return opsets_; }
  const std::map<std::string, int>& opsets() const { return opsets_; }

 private:
  std::string name_;
  Graph* parent_;
  std::vector<std::unique_ptr<Value>> values_;
  std::map<std::string, Value*> by_name_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_, outputs_, initializers_;
  std::map<std::string, int> opsets_;
  size_t name_counter_ = 0;
};

// The subgraphs a node holds in its graph and graphs attributes (If branches, Loop and Scan
// bodies), in attribute order; nested ones are reached through their own nodes.
std::vector<Graph*> subgraphs_of(const Node& node);

// Human-readable text of a graph and its subgraphs.
std::string print_graph(const Graph& graph);
// Checks SSA (each value defined once, before use), known types of graph inputs, dangling uses
// and subgraph captures; throws InvalidArgument naming the node and value.
void validate_graph(const Graph& graph);
// Counts nodes per op type, subgraphs included.
std::map<std::string, size_t> op_histogram(const Graph& graph);

}  // namespace kiln::ir
