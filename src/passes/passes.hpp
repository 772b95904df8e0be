#pragma once
// The graph passes. Each is a small value type; its file holds the one job it does.
#include <cstddef>
#include <string>
#include <string_view>

#include "ir/graph.hpp"

namespace kiln::passes {

// Removes nodes whose outputs nothing reads (graph outputs and subgraph captures count as reads)
// and initializers nothing reads.
struct EliminateDeadCode {
  std::string_view name() const { return "eliminate_dead_code"; }
  bool apply(ir::Graph& graph) const;
};

// Removes nodes that pass their input through unchanged: Identity, Dropout in inference,
// Cast to the same type, Reshape / Expand to the same static shape, Transpose by the identity
// permutation.
struct EliminateIdentity {
  std::string_view name() const { return "eliminate_identity"; }
  bool apply(ir::Graph& graph) const;
};

// Evaluates nodes whose inputs are all constants with their reference kernels and replaces them
// by initializers; also resolves Shape and Size of statically-shaped values. Skips random ops,
// nodes with subgraphs and results larger than `max_bytes`.
struct FoldConstants {
  size_t max_bytes = size_t{16} << 20;
  std::string_view name() const { return "fold_constants"; }
  bool apply(ir::Graph& graph) const;
};

// Merges nodes that compute the same op with the same attributes on the same inputs, and
// initializers holding identical data.
struct EliminateCommonSubexpressions {
  std::string_view name() const { return "eliminate_common_subexpressions"; }
  bool apply(ir::Graph& graph) const;
};

// Folds an inference-mode BatchNormalization into the Conv feeding it (constant weights, float32
// or float64, the Conv output read only by the BatchNormalization).
struct FuseConvBatchNorm {
  std::string_view name() const { return "fuse_conv_batchnorm"; }
  bool apply(ir::Graph& graph) const;
};

// Re-runs shape inference over the graph's nodes in order, so dims fixed or bounded on the inputs
// reach every value (kiln compile --shape / --shape-range).
struct InferShapes {
  std::string_view name() const { return "infer_shapes"; }
  bool apply(ir::Graph& graph) const;
};

// Fixes or bounds the dims of graph input `name` (static dims, or symbols with a min/max);
// InvalidArgument when the rank or a fixed dim disagrees with the model.
void set_input_shape(ir::Graph& graph, const std::string& name, const Shape& shape);

// True for ops whose outputs are not a function of their inputs (random generators); passes
// must neither fold nor merge them.
bool is_nondeterministic(const ir::Node& node);

}  // namespace kiln::passes
