#pragma once
// An 8-bit weight with zero points as the symmetric int8 weight oneDNN's int8 kernels take:
// w - zero_point, which dequantizes to the same values ((w - z) * scale). uint8 weights around
// 128 (onnxruntime's QUInt8) and asymmetric int8 weights fit; a difference outside int8 does
// not, and such a weight stays on the reference path. Shared by passes/fuse_quantized_ops (QDQ
// files) and the CPU's int8 kernels (ONNX's QLinearConv / QLinearMatMul / ConvInteger).
#include <cstdint>
#include <optional>

#include "core/tensor.hpp"

namespace kiln::ops {

// `w` (uint8 or int8) minus `zero` (null: 0; one value, or one per index along `axis`, of w's
// type) as int8, or nullopt when a difference leaves [-128, 127] or the types do not fit.
std::optional<Tensor> int8_minus_zero_point(const Tensor& w, const Tensor* zero, int64_t axis);

// True when `w` is int8 and every zero point is 0 (nothing to subtract).
bool symmetric_int8(const Tensor& w, const Tensor* zero);

}  // namespace kiln::ops
