#pragma once
// What a 2-D Conv or ai.kiln FusedConv node asks of a GPU convolution, read once from its
// attributes and declared types (ConvNode), and a run's output extent and pads from its input
// (conv_extent, the window's geometry in window_2d.hpp). Shared by Kiln's own convolutions: the
// depthwise kernel (depthwise_conv_kernels.cpp) and the implicit-GEMM one (own_conv_kernels.cpp),
// each of which adds its own limits (groups, channel counts).
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/runtime/window_2d.hpp"
#include "backends/kernel_table.hpp"
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
  // FusedConv's input_max: X read as min(X, input_max) (+inf: none). Only the depthwise kernel
  // takes it; the others refuse it (refuse_input_max).
  float input_max = std::numeric_limits<float>::infinity();
};

// Why a kernel that does not clip its input cannot run `c` ("" when it has no input_max).
std::string refuse_input_max(const ConvNode& c, std::string_view kernel);

// Empty when `node` is a 2-D convolution of float32, float16 or bfloat16 with a static channel
// count, constant weights [filters, channels / groups, kh, kw] of the input's type, an optional
// constant bias of one value per filter, valid strides, dilations and pads, and (FusedConv) a
// known activation and a residual of the input's type; else why not. Fills `out`.
std::string read_conv_node(const ir::Node& node, ConvNode& out);

// Element i of a constant float32, float16 or bfloat16 tensor (a convolution's weights or
// bias) as float: what the own convolutions upload, widened once.
float constant_element(const Tensor& t, int64_t i);

// One run's output extent and pads for an input of h x w (window_2d.hpp).
using ConvExtent = WindowExtent;
inline ConvExtent conv_extent(const ConvNode& c, int64_t h, int64_t w) {
  return window_extent(c, h, w);
}

class GpuBackendImpl;

// Kiln's own implicit-GEMM convolution (gpu.own.conv, own_conv_kernels.cpp) for `node`, or null
// where it refuses the node: cuDNN's convolution (gpu.cudnn.conv) times it as a tactic.
std::unique_ptr<Kernel> make_own_conv_kernel(GpuBackendImpl& backend, const ir::Node& node);

// A convolution kernel's two table entries, Conv and ai.kiln FusedConv, at `priority`:
// CHECK(node, ConvNode&) says why the kernel cannot run a node (empty: it can) and fills the
// ConvNode; KERNEL is constructed from (GpuBackendImpl&, node, ConvNode). Used inside an
// anonymous namespace of the kernel's file.
#define KILN_REGISTER_GPU_CONV_KERNEL(NAME, PRIORITY, CHECK, KERNEL)                     \
  std::string check_conv_node(const ir::Node& node) {                                    \
    ConvNode shape;                                                                      \
    return CHECK(node, shape);                                                           \
  }                                                                                      \
  std::unique_ptr<Kernel> create_conv_kernel(Backend& backend, const ir::Node& node) {   \
    ConvNode shape;                                                                      \
    CHECK(node, shape); /* the table's create ran the check before */                    \
    return std::make_unique<KERNEL>(static_cast<GpuBackendImpl&>(backend), node, shape); \
  }                                                                                      \
  KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,                                      \
                        .op_type = "Conv",                                               \
                        .name = NAME,                                                    \
                        .priority = PRIORITY,                                            \
                        .check = check_conv_node,                                        \
                        .create = create_conv_kernel});                                  \
  KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,                                      \
                        .domain = "ai.kiln",                                             \
                        .op_type = "FusedConv",                                          \
                        .name = NAME,                                                    \
                        .priority = PRIORITY,                                            \
                        .check = check_conv_node,                                        \
                        .create = create_conv_kernel})

}  // namespace kiln::backends::gpu
