#pragma once
// What a 2-D Conv or ai.kiln FusedConv node asks of a GPU convolution, read once from its
// attributes and declared types (ConvNode), and a run's output extent and pads from its input
// (conv_extent, the window's geometry in window_2d.hpp). Shared by Kiln's own convolutions: the
// depthwise kernel (depthwise_conv_kernels.cpp) and the implicit-GEMM one (own_conv_kernels.cpp),
// each of which adds its own limits (groups, channel counts).
#include <cstdint>
#include <string>
#include <vector>

#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/runtime/window_2d.hpp"
#include "core/dtype.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {

struct ConvNode : Window2d {
  DataType dtype = DataType::Undefined;
  int64_t channels = 0;  // of the input (static)
  int64_t filters = 0, groups = 1;
  kernels::GemmActivation activation = kernels::GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;
  bool bias = false;
  bool residual = false;  // FusedConv's Z (input 3), added before the activation
};

// Empty when `node` is a 2-D convolution of float32, float16 or bfloat16 with a static channel
// count, constant weights [filters, channels / groups, kh, kw] of the input's type, an optional
// constant bias of one value per filter, valid strides, dilations and pads, and (FusedConv) a
// known activation and a residual of the input's type; else why not. Fills `out`.
std::string read_conv_node(const ir::Node& node, ConvNode& out);

// One run's output extent and pads for an input of h x w (window_2d.hpp).
using ConvExtent = WindowExtent;
inline ConvExtent conv_extent(const ConvNode& c, int64_t h, int64_t w) {
  return window_extent(c, h, w);
}

}  // namespace kiln::backends::gpu
