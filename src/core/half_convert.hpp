#pragma once
// Bulk float32 <-> float16 (and bfloat16) conversion, for the fp16 pass (weights) and the CPU
// kernels that compute fp16 graphs in float32 (activations). Uses the F16C / AVX-512 conversion
// instructions when the CPU has them (picked at run time, so a portable build still uses them),
// else the scalar routines of core/half.hpp; both round to nearest even, so results are identical.
#include <cstddef>
#include <cstdint>

namespace kiln {

inline constexpr float kFloat16Max = 65504.0f;

void halves_to_floats(const uint16_t* in, float* out, size_t n);
void floats_to_halves(const float* in, uint16_t* out, size_t n);

// Like floats_to_halves, but finite values beyond the float16 range become +-65504 instead of
// infinities (infinities and NaN stay what they are). Returns how many values were clamped.
size_t floats_to_halves_clamped(const float* in, uint16_t* out, size_t n);

// Bulk float32 <-> bfloat16 (bf16 engines: weights in the pass, activations in the CPU kernels
// that compute bf16 nodes in float32). Round to nearest even, NaN kept quiet: the same bits as
// core/half.hpp's scalar float_to_bfloat16_bits, with AVX-512 integer arithmetic where the CPU
// has it (not VCVTNEPS2BF16, which flushes denormals and would differ from the scalar form).
void bfloat16s_to_floats(const uint16_t* in, float* out, size_t n);
void floats_to_bfloat16s(const float* in, uint16_t* out, size_t n);

}  // namespace kiln
