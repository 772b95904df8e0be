#pragma once
// The layers `kiln prune` can prune: Conv, MatMul and Gemm nodes whose weight (input 1) is a
// float32 initializer, each with the axes that matter for pruning it, named as `kiln quantize`
// names nodes (the ONNX name, or "Conv #2": the third Conv, where it has none).
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::compiler {

struct WeightLayer {
  ir::Node* node = nullptr;
  ir::Value* weight = nullptr;
  std::string display;
  int64_t output_axis = 0;     // the weight's output channels / features
  int64_t reduction_axis = 1;  // the axis summed over (input channels / K): 2:4 groups run along it
};

struct WeightLayers {
  std::vector<WeightLayer> layers;
  // Candidates of the op types that cannot be pruned, with why (a computed weight, a rank that is
  // not 2 for MatMul, a transposed Gemm A).
  std::vector<std::pair<std::string, std::string>> skipped;
};

// The display name of every node of `op_types`, in graph order.
std::string node_display(const ir::Node& node, int index);

WeightLayers find_weight_layers(const ir::Graph& graph, const std::vector<std::string>& op_types,
                                const std::set<std::string>& excluded);

}  // namespace kiln::compiler
