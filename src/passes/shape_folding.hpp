#pragma once
// Constant folding helpers: running one node's reference kernel on constant inputs, and the
// values that depend only on static dims of a shape (FoldConstants uses both).
#include <optional>
#include <vector>

#include "core/rt_value.hpp"
#include "ir/graph.hpp"

namespace kiln::passes {

// Runs n's reference kernel on `inputs` (None for absent ones); nullopt when no kernel is
// registered or the kernel throws (left for run time, where the error reaches the user).
std::optional<std::vector<RtValue>> evaluate_node(const ir::Node& n,
                                                  const std::vector<RtValue>& inputs);

// The value of a node that reads dims only, when those dims are static:
//   Shape / Size of a statically shaped value;
//   Gather / Slice of Shape(x) (other inputs constant) whose selected dims of x are static,
//   even where other dims of x are symbolic.
std::optional<Tensor> fold_shape_value(const ir::Node& n);

// For Reshape(data, Concat(...)) whose shape parts are constants or dims gathered from a Shape
// (torch's x.view(x.size(0), x.size(1), h, d)): the constant shape to use instead, with 0
// ("copy the input's dim", allowzero 0) where the gathered dim is data's dim at that position
// (the same static value or the same symbol). nullopt when any part is something else.
std::optional<Tensor> reshape_target_from_dims(const ir::Node& reshape);

}  // namespace kiln::passes
