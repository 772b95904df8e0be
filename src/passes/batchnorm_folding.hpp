#pragma once
// An inference-mode BatchNormalization with constant parameters is a per-channel affine map
// y = scale[c] * x + shift[c]; FuseConvBatchNorm and FuseGemmBatchNorm fold it into the weights
// and bias of the node before it.
#include <optional>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::passes {

struct BatchNormAffine {
  std::vector<double> scale;  // gamma / sqrt(var + epsilon)
  std::vector<double> shift;  // beta - mean * scale
};

// The affine map of `bn` when it is an ai.onnx BatchNormalization in inference form (one output,
// no training mode, spatial) whose four parameters are constants of element type `type`
// (float or double) with `channels` elements each; nullopt otherwise.
std::optional<BatchNormAffine> inference_batchnorm(const ir::Node& bn, DataType type,
                                                   int64_t channels);

}  // namespace kiln::passes
