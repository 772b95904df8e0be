#pragma once
// The activations of RNN, GRU and LSTM as the node names them: the `activations` list (or the
// op's defaults), one list shared by both directions or one per direction, each with its alpha
// and beta taken in order from `activation_alpha` / `activation_beta` or the spec's defaults.
// Shared by the reference (ops/recurrent.cpp) and the GPU's LSTM, so both read a node alike.
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

struct RecurrentActivation {
  std::string name;  // lower case: sigmoid, tanh, relu, affine, leakyrelu, thresholdedrelu,
                     // scaledtanh, hardsigmoid, elu, softsign, softplus
  double alpha = 0, beta = 0;
};

// `defaults`: the op's per-direction list ({"Sigmoid", "Tanh", "Tanh"} for LSTM). Returns
// defaults.size() entries per direction; an unknown name is Unsupported, a wrong count
// InvalidArgument.
std::vector<RecurrentActivation> read_recurrent_activations(
    const AttrReader& ctx, const std::vector<std::string>& defaults, int dirs);

}  // namespace kiln::ops
