#pragma once
// Gelu (x * Phi(x), the erf form) over a float32 buffer, in place: AVX-512 where the CPU has it
// (picked at run time). oneDNN 2.6's gelu_erf, as a matmul post-op, cost about 250 us over
// BERT-base's 128 x 3072 FFN activation at one thread (0.6 ns an element); this loop 130 us
// there, so float32 products write their result and this pass follows (an 8-bit result keeps
// the post-op: its float32 values would make a round trip through memory).
#include <cstdint>

namespace kiln::backends::cpu {

// x[i] = x[i] / 2 * (1 + erf(x[i] / sqrt(2))) for i < n, within 1e-6 of the exact value plus
// 2 float32 ulps of it (erf by a rational function of degree 5 / 5 in z^2 for |z| <= 4, +-1
// beyond, where it is 1 to float precision). NaN stays NaN.
void gelu_in_place(float* x, int64_t n);

}  // namespace kiln::backends::cpu
