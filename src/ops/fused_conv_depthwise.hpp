#pragma once
// ai.kiln FusedConvDepthwise's second stage (src/ops/fused_conv_depthwise.cpp): its activation
// lives under the attribute names dw_activation / dw_activation_params, beside the first stage's
// activation / activation_params. The pass that writes the node, the reference and the CPU
// kernel that read it go through these two.
#include "ops/fused_activation.hpp"

namespace kiln::ops {

FusedActivation depthwise_stage_activation(const ir::Node& node);
void set_depthwise_stage_activation(ir::Node& node, const FusedActivation& act);

}  // namespace kiln::ops
