#pragma once
// The int8 kernels' path for a weight whose zero points leave int8 (uint8 weights over 0..255
// with a zero point, as onnxruntime's quantizer writes with weight_type QUInt8): oneDNN's int8
// kernels take symmetric int8 weights only, so the product runs with w - c (c = 128 for uint8,
// Int8Weight) into int32, and this pass does the rest, row by row of the result (channels
// contiguous): it takes d[m] times the row's sum of x - x_zero off each accumulator (the rest of
// the zero point: sum (x - xz)(w - z) = sum (x - xz)(w - c) - d[m] sum (x - xz)), then does what
// QLinearParams::attr asks of oneDNN: the bias, the scales, the residual, the activation and the
// output's type (float32, bfloat16, or 8-bit with its scale and zero point).
#include <cstdint>
#include <span>

#include "backends/cpu/qlinear_params.hpp"

namespace kiln::backends::cpu {

struct WidenedProduct {
  const int32_t* acc = nullptr;  // [rows, channels], the product with w - c
  int64_t rows = 0, channels = 0;
  // sums[row * groups + g]: the sum of x - x_zero over what row's channels of group g read.
  const int32_t* sums = nullptr;
  int64_t groups = 1;
  std::span<const int32_t> d;      // one a channel (Int8Weight::correction)
  const void* residual = nullptr;  // [rows, channels] of params.residual_type when params.residual
  void* y = nullptr;               // [rows, channels] of params.y_type (may be `residual`)
  int threads = 1;
};

void finish_widened_product(const QLinearParams& params, const WidenedProduct& product);

// `params` for the int32 product itself: scales 1, the source's zero point, no bias, residual,
// activation or requantization (ConvInteger's attributes).
QLinearParams widened_product_params(const QLinearParams& params);

}  // namespace kiln::backends::cpu
