#pragma once
// What Kiln's hand-vectorized x86 loops share (core/half_convert, backends/cpu/quantize_loops,
// backends/cpu/silu_loop): <immintrin.h> in GCC-compatible x86-64 builds (KILN_X86_SIMD), the
// run-time AVX-512 check, and the vzeroupper GCC leaves out. Included by those .cpp files only:
// the warning setting below holds for the rest of the file that includes it.
#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)
// GCC 12's AVX-512 headers start masked intrinsics from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized (and, for some once inlined, -Wuninitialized) reports; the values are
// never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define KILN_X86_SIMD 1

namespace kiln::simd {

inline bool has_avx512f() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}

// AVX512_BF16 (vcvtneps2bf16, vdpbf16ps): the bfloat16 stores of the attention's softmax.
inline bool has_avx512bf16() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return yes;
}

// 16 float32 values as bfloat16 bits: rounded to nearest even (0x7fff plus the kept part's
// lowest bit, then the upper half), NaN kept quiet: core/half.hpp's float_to_bfloat16_bits, not
// VCVTNEPS2BF16 (which flushes denormals).
__attribute__((target("avx512f"))) inline __m256i bfloat16_bits(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  rounded = _mm512_mask_mov_epi32(
      rounded, nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(rounded);
}

// GCC leaves out the vzeroupper it owes before a tail call (a loop's scalar remainder), so the
// upper halves of the vector registers stay dirty and every legacy-SSE instruction after it
// (the double arithmetic of the reference kernels) runs much slower: measured 2x on the small
// BERT's attention and LayerNorm kernels. Vector loops call this before leaving.
__attribute__((target("avx"))) inline void clean_upper_state() {
  _mm256_zeroupper();
}

}  // namespace kiln::simd
#endif
