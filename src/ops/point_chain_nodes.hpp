#pragma once
// The host side of point chains (point_chain.hpp): an ONNX element-wise node as one step (its
// op and the attributes or constant bounds it takes), and the ai.kiln PointChain node's
// attributes, written by passes/fuse_point_chains and read by the reference and the GPU kernel.
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel_context.hpp"
#include "ops/point_chain.hpp"

namespace kiln::ops {

// `node` (ai.onnx Relu, ..., Clip with constant bounds, Add, Sub, Mul, Div, Pow, Max / Min of two
// inputs, Gelu of ai.onnx or ai.kiln) as a step with its alpha / beta; "" or why it is none.
// The step's operand fields are the caller's.
std::string point_step_of(const ir::Node& node, point::PointStep& step);

// The attributes of an ai.kiln PointChain: `ops` (names), `operands` and `value_second` (ints)
// and `params` (two floats a step). read_point_chain throws InvalidArgument on a malformed node
// (an unknown op, wrong counts, an operand past the node's inputs).
std::vector<point::PointStep> read_point_chain(const AttrReader& attrs);
void write_point_chain(ir::Node& node, const std::vector<point::PointStep>& steps);

}  // namespace kiln::ops
