#pragma once
// The sliding window of a 2-D convolution or pooling node on the GPU: strides, dilations, pads
// or auto_pad, and ceil_mode, read once from the attributes (read_window_2d), and a run's
// output extent and pads from its input (window_extent), as ONNX defines them. Shared by
// Kiln's own convolutions (conv_node.hpp) and pooling (own_pool_kernels.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::backends::gpu {

struct Window2d {
  int64_t kh = 1, kw = 1;  // set by the caller (the weights' or kernel_shape's)
  int stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  // Explicit pads (top, left, bottom, right) unless auto_pad asks for SAME (computed per input).
  std::vector<int64_t> pads = {0, 0, 0, 0};
  enum class AutoPad { None, SameUpper, SameLower } auto_pad = AutoPad::None;
  // Pooling's ceil_mode: output sizes rounded up, a last window starting inside the input or
  // its leading pad (explicit pads only, as the reference's geometry).
  bool ceil_mode = false;
};

// Empty when the node's strides, dilations, pads, auto_pad and ceil_mode describe a valid 2-D
// window (`what` names the op in the reasons, "convolution" or "pooling"); else why not.
std::string read_window_2d(const ir::Node& node, const char* what, Window2d& out);

// One run's output extent and pads for an input of h x w; oh or ow 0 when the window does not
// fit the padded input.
struct WindowExtent {
  int64_t oh = 0, ow = 0;
  int64_t pads[4] = {0, 0, 0, 0};  // top, left, bottom, right
};
WindowExtent window_extent(const Window2d& win, int64_t h, int64_t w);

}  // namespace kiln::backends::gpu
