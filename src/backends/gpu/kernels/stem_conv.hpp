#pragma once
// Launcher of Kiln's own convolution for inputs of few channels (stem_conv.hip): a network's first
// convolution (3 channels in, a few dozen out, 3x3: MobileNetV2's and EfficientNet's stems),
// where the libraries pad the 3 channels to their tiles' width and ran MobileNetV2 b64's stem at
// 390 us on the H100, about 18x its memory time. Each output is a short dot product (27
// multiply-adds per channel), done on the CUDA cores in float32. Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/gemm.hpp"  // GemmActivation: the fused kernels' activation
#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// Limits of the kernel (the runtime refuses other nodes): taps kh kw c of one output at most
// kStemMaxTaps, weights kh kw c f at most kStemMaxWeights (they live in shared memory as
// float32), f a multiple of kStemChannelGroup (a thread's outputs: one 16-byte store of 16-bit
// outputs).
constexpr int kStemMaxTaps = 64;
constexpr int kStemMaxWeights = 4096;
constexpr int kStemChannelGroup = 8;

// y[n, oh, ow, f] (channels-last) = act(bias[f] + sum_{r, s, c} x[n, c, oh sh - pt + r dh,
// ow sw - pl + s dw] w[r, s, c, f]), x read as 0 outside the image and through its element
// strides (row-major or channels-last alike). w: float32 [kh, kw, c, f]; bias float32 [f] or
// null; x and y of `type`, computed in float32 and rounded once.
struct StemConvArgs {
  FloatType type = FloatType::F32;
  const void* x = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  void* y = nullptr;
  int64_t x_stride_n = 0, x_stride_c = 0, x_stride_h = 0, x_stride_w = 0;
  int n = 0, h = 0, w_in = 0, c = 0, f = 0, oh = 0, ow = 0;
  int kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0, dil_h = 1, dil_w = 1;
  GemmActivation activation = GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;
};

hipError_t launch_stem_conv(const StemConvArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
