#pragma once
// Launcher of Kiln's own depthwise convolution (depthwise_conv.hip): group == C_in == C_out, 2-D,
// channels-last (NHWC) input, output and residual, any filter size, stride, pads and dilation;
// float32, float16 and bfloat16 computed in float32 and rounded once; bias, a residual Z and the
// fused activation in the epilogue. Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/gemm.hpp"  // GemmActivation: the fused kernels' activation
#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// y[n, oh, ow, c] = act(sum_{r,s} x'[n, oh sh - pt + r dh, ow sw - pl + s dw, c] w[r, s, c]
//                       + bias[c] + z[n, oh, ow, c])
// with x' = min(x, input_max) (FusedConv's input_max, +inf when none), read as 0 outside
// [0, h) x [0, w). The bottom and right pads only set oh / ow, which
// the caller computes. Weights are float32 [kh, kw, c] (the constant reordered and widened
// once), bias float32 [c] or null; x, z (null: none) and y are of `type`.
struct DepthwiseArgs {
  FloatType type = FloatType::F32;
  const void* x = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  const void* z = nullptr;
  void* y = nullptr;
  int n = 0, h = 0, w_in = 0, c = 0, oh = 0, ow = 0;
  int kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0, dil_h = 1, dil_w = 1;
  GemmActivation activation = GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;  // Clip: min, max; LeakyRelu: alpha; HardSigmoid
  // The upper half of the producer's Clip, applied as x is loaded: the producer's epilogue keeps
  // the Relu half (passes/fold_clip_into_depthwise). +inf: none.
  float input_max = __builtin_huge_valf();
  int multiprocessors = 1;  // of the device: sizes the work per thread
  // Tuning overrides, 0 for the launcher's choice: bytes of channels per thread load (16 or 8:
  // 8 / 4 channels of a 16-bit type, 4 / 2 of float32), output pixels per thread along W (2 or
  // 4) and output rows per thread along H (1, 2 or 4) in the tiled kernels.
  int vector_bytes = 0, pixels = 0, rows = 0;
};

// What launch_depthwise_conv runs for `args`: the tiled kernel (3x3 or 5x5 filters, W stride 1
// or 2, W dilation 1, channels a whole number of vectors) or the generic one; channels per
// thread, output pixels along W and rows along H per thread. For traces and the benchmark.
struct DepthwisePlan {
  bool tiled = false;
  int vec = 1, pixels = 1, rows = 1;
};
DepthwisePlan depthwise_plan(const DepthwiseArgs& args);

hipError_t launch_depthwise_conv(const DepthwiseArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
