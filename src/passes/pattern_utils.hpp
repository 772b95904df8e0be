#pragma once
// What the fusion passes share: a rewriter that keeps the readers of every value known while a
// sweep rewrites the graph, and small predicates for matching node patterns.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::passes {

// One sweep over one graph. The readers of every value are computed once when the sweep starts;
// a rewrite marks the values it touches (inputs and outputs of the nodes it adds, changes or
// removes), and any later decision that depends on the readers of a touched value waits for the
// next sweep. So a sweep never acts on stale reader lists and never recomputes them.
class Rewriter {
 public:
  explicit Rewriter(ir::Graph& graph);
  ir::Graph& graph() const { return graph_; }

  // Readers of `v` (a node holding a subgraph that reads v counts as its reader).
  const std::vector<ir::Node*>& readers(const ir::Value* v) const;
  bool touched(const ir::Value* v) const { return touched_.count(v) != 0; }
  // v is read by exactly one node, is no graph output, and this sweep has not touched it: the
  // condition for fusing away the node that produces it.
  bool single_use(const ir::Value* v) const;
  // v is no graph output, untouched, and read only by nodes in `nodes` (at least one).
  bool used_only_by(const ir::Value* v, const std::vector<const ir::Node*>& nodes) const;
  // The producer of `v` when it is an ai.onnx `op_type` node of this graph not removed by this
  // sweep (any op when op_type is empty); nullptr otherwise.
  ir::Node* producer(const ir::Value* v, std::string_view op_type = {}) const;
  bool removed(const ir::Node* n) const { return removed_.count(n) != 0; }

  // A fresh value for a new node's output.
  ir::Value* new_value(const std::string& base, TypeInfo type);
  ir::Value* new_constant(const std::string& base, Tensor data);
  // Inserts a node before `position`, marking its values touched; its opset is `opset`.
  ir::Node* insert_node(const ir::Node* position, std::string op_type, std::string domain,
                        std::vector<ir::Value*> inputs, std::vector<ir::Value*> outputs, int opset);
  // Marks a node's inputs and outputs touched (after changing its inputs or attributes).
  void touch(const ir::Node& n);
  void touch(const ir::Value* v) { touched_.insert(v); }
  // Makes every reader of `from` read `to` (`to` takes the name when `from` is a graph output)
  // and removes `dead`, the nodes of the matched pattern, whose outputs nothing else reads.
  void replace(ir::Value* from, ir::Value* to, const std::vector<ir::Node*>& dead);
  // Whether replace(from, to) can keep the name of `from` (always, unless `from` is a graph
  // output and `to` is not a node output of this graph that could take its name).
  bool can_replace(const ir::Value* from, const ir::Value* to) const;
  void remove(ir::Node* n);

 private:
  ir::Graph& graph_;
  std::map<const ir::Value*, std::vector<ir::Node*>> uses_;
  std::set<const ir::Value*> touched_;
  std::set<const ir::Node*> removed_;
};

using RewriteFn = std::function<bool(Rewriter&, ir::Node&)>;
// Calls `rewrite` on every node of `root` and of its subgraphs (true when it changed the graph),
// sweep after sweep until a sweep changes nothing. True if anything changed.
bool rewrite_graph(ir::Graph& root, const RewriteFn& rewrite);

// ---- matching predicates -------------------------------------------------------------------

// n is an ai.onnx node of this op type.
bool is_op(const ir::Node* n, std::string_view op_type);
// n is an ai.kiln node (a fused op) of this op type.
bool is_kiln_op(const ir::Node* n, std::string_view op_type);
bool is_float_dtype(DataType t);
// v is a tensor of a float element type (float16, bfloat16, float, double).
bool is_float_value(const ir::Value* v);
// The single element of a constant (any shape of one element) as double.
std::optional<double> scalar_constant(const ir::Value* v);
// v is a constant of one element equal to `expected` within float rounding of v's type.
bool is_scalar_constant(const ir::Value* v, double expected);
// For a two-input node one of whose inputs is `v`: the other input (nullptr when neither is v).
ir::Value* other_input(const ir::Node& n, const ir::Value* v);
int64_t int_attr(const ir::Node& n, const char* name, int64_t fallback);
float float_attr(const ir::Node& n, const char* name, float fallback);
std::optional<std::vector<int64_t>> ints_attr(const ir::Node& n, const char* name);
std::string string_attr(const ir::Node& n, const char* name, const std::string& fallback);
// The axes of ReduceMean / Squeeze / Unsqueeze: the attribute (older opsets) or the constant
// input 1; nullopt when not constant. An absent axes input gives an empty vector.
std::optional<std::vector<int64_t>> axes_of(const ir::Node& n);
// The rank of v when known.
std::optional<size_t> rank_of(const ir::Value* v);
// The permutation of a Transpose (reversed dims without the attribute, given the input's rank).
std::optional<std::vector<int64_t>> perm_of(const ir::Node& transpose);
// Dims equal for certain: both static and equal, or the same named symbol.
bool same_dim(const Dim& a, const Dim& b);
bool same_shape(const ir::Value* a, const ir::Value* b);

// A Pad that a convolution's own padding can replace: constant mode, value 0 (absent or a
// constant), constant non-negative amounts on the spatial dims of a rank 3-5 input and none on
// the batch and channel dims, no axes input. Its pads ([begins..., ends...] over every dim),
// else nullopt.
std::optional<std::vector<int64_t>> zero_spatial_pads(const ir::Node& pad);
// `conv` (Conv / FusedConv) has explicit pads (auto_pad NOTSET) for `spatial` dims or none.
bool has_explicit_pads(const ir::Node& conv, size_t spatial);
// Adds a zero_spatial_pads result to `conv`'s pads (which has_explicit_pads accepted).
void add_spatial_pads(ir::Node& conv, const std::vector<int64_t>& pad_pads);

// Element i of a float or double tensor as double, and back (constants the passes rewrite).
double element(const Tensor& t, int64_t i);
void set_element(Tensor& t, int64_t i, double v);

// The version of `domain` the graph imports (0 when none).
int imported_opset(const ir::Graph& g, const std::string& domain);
// Makes `g` and the graphs enclosing it import ai.kiln (version 1) and returns its version.
int import_kiln_domain(ir::Graph& g);

}  // namespace kiln::passes
