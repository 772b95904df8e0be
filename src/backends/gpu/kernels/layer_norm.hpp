#pragma once
// Launcher of the LayerNormalization / SkipLayerNormalization kernel (layer_norm.hip). Plain
// declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// Normalizes each of `rows` rows of `cols` contiguous elements of z, where z = x, or for
// SkipLayerNormalization z = round(round(x + skip) + bias) (each sum rounded to the element
// type, as the reference's Add nodes would). Every operand but x and y may be null. A
// broadcast operand p of `*_n` elements is read at (row * cols + col) % p_n (a suffix of x's
// dims). y = (z - mean) * inv_std * gamma + beta; mean and inv_std (float32, one per row) and
// sum (z, in the element type) are optional outputs.
struct LayerNormArgs {
  const void* x = nullptr;
  const void* skip = nullptr;
  const void* bias = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  void* y = nullptr;
  float* mean = nullptr;
  float* inv_std = nullptr;
  void* sum = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t skip_n = 0, bias_n = 0, gamma_n = 0, beta_n = 0;
  float epsilon = 1e-5f;
  // Rows each wavefront of the 16-byte vector kernel walks (its grid's size only): more than
  // one lets a wavefront's next loads overlap other wavefronts' stores. 1: one row each.
  int rows_per_wave = 1;
};

hipError_t launch_layer_norm(FloatType type, const LayerNormArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
