#pragma once
// Launchers of the per-channel normalizations (channel_norm.hip): BatchNormalization in inference
// (y = x a[c] + b[c], a and b folded from scale, bias, mean and variance on the host) and LRN
// (each element over the squares of its neighbouring channels). [N, C, spatial...] tensors,
// row-major or channels-last ([N, spatial..., C]), in float32, float16 or bfloat16 (computed in
// float32). Plain declarations: the runtime side (g++ on NVIDIA) includes this.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

struct ChannelShape {
  int64_t images = 0, channels = 0, spatial = 1;
  bool channels_last = false;
};

// `ab`: 2 * channels floats on the device, the multipliers then the offsets.
hipError_t launch_batch_norm(FloatType type, const void* x, void* y, const ChannelShape& shape,
                             const float* ab, hipStream_t stream);

// ONNX LRN: y = x / (bias + alpha / size * sum of squares over channels c - floor((size - 1)
// / 2) .. c + ceil((size - 1) / 2))^beta.
hipError_t launch_lrn(FloatType type, const void* x, void* y, const ChannelShape& shape, int size,
                      float alpha, float beta, float bias, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
