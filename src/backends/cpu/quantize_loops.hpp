#pragma once
// The loops of per-tensor QuantizeLinear and DequantizeLinear between float32 and 8-bit
// integers, bit for bit the reference's numerics. AVX-512 where the CPU has it (picked at run
// time, so a portable build still uses it): GCC's vectorizer made 128-bit code with the masks
// spilled for the portable loop, 2.3 cycles an element.
#include <cstdint>

#include "core/half.hpp"

namespace kiln::backends::cpu {

// y[i] = saturate(round_half_even(x[i] / scale) + zero) for i < n, in float32; NaN gives 0. A
// 16-bit float x is widened first (exactly: what a Cast to float32 before it computes).
void quantize_to_u8(const float* x, uint8_t* y, int64_t n, float scale, float zero);
void quantize_to_s8(const float* x, int8_t* y, int64_t n, float scale, float zero);
void quantize_to_u8(const BFloat16* x, uint8_t* y, int64_t n, float scale, float zero);
void quantize_to_s8(const BFloat16* x, int8_t* y, int64_t n, float scale, float zero);
void quantize_to_u8(const Float16* x, uint8_t* y, int64_t n, float scale, float zero);
void quantize_to_s8(const Float16* x, int8_t* y, int64_t n, float scale, float zero);
// The smallest and largest of x[0..n) and 0 (DynamicQuantizeLinear's range); NaN is skipped.
void range_with_zero(const float* x, int64_t n, float& lo, float& hi);
// y[i] = (x[i] - zero) * scale in float32.
void dequantize_from_u8(const uint8_t* x, float* y, int64_t n, float scale, int32_t zero);
void dequantize_from_s8(const int8_t* x, float* y, int64_t n, float scale, int32_t zero);

}  // namespace kiln::backends::cpu
