#pragma once
// Floating-point operation counts of a graph, from its value shapes: each node by its op's
// formula (OpTraits::flops; src/ops/op_flops.hpp: Conv / Gemm / MatMul exactly, pooling by
// window, reductions by input element, data movement 0, every other op ~1 per output element).
// Symbolic dims take the value given, else the low end of their range.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::compiler {

struct FlopCount {
  std::map<std::string, double> by_op_type;
  std::map<const ir::Node*, double> by_node;  // the counted nodes of the main graph
  double total = 0;
  // Nodes whose shapes are not known well enough to count, by op type.
  std::map<std::string, size_t> uncounted;
  // Symbolic dims the count assumed a value for.
  std::map<std::string, int64_t> assumed;
  size_t control_flow = 0;  // If/Loop/Scan nodes, whose bodies are not counted
};

FlopCount count_flops(const ir::Graph& graph, const std::map<std::string, int64_t>& dims);

// 1234567 -> "1.23 M"
std::string si_number(double value);

}  // namespace kiln::compiler
