#pragma once
// Recognizes the activation applied to a value, in the forms exporters write it, as one of the
// fused activations of ops/fused_activation.hpp.
#include <optional>
#include <vector>

#include "ops/fused_activation.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {

struct ActivationMatch {
  ops::FusedActivation activation;
  ir::Value* output = nullptr;   // the activated value
  std::vector<ir::Node*> nodes;  // the activation's nodes, last first
};

// The activation that the readers of `v` apply to it, when they do nothing else with v:
// Relu, Sigmoid, Tanh, HardSwish, HardSigmoid, LeakyRelu, Clip (constant bounds, min <= max),
// Gelu (ai.onnx or ai.kiln, erf or tanh), Swish (alpha 1), and the patterns x * Sigmoid(x)
// (SiLU) and x * HardSigmoid(x, 1/6, 1/2) (HardSwish). nullopt when v is a graph output, was
// touched by this sweep, or is not a float tensor.
std::optional<ActivationMatch> match_activation(const Rewriter& rw, ir::Value* v);

}  // namespace kiln::passes
