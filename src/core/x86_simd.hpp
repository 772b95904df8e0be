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

// GCC leaves out the vzeroupper it owes before a tail call (a loop's scalar remainder), so the
// upper halves of the vector registers stay dirty and every legacy-SSE instruction after it
// (the double arithmetic of the reference kernels) runs much slower: measured 2x on the small
// BERT's attention and LayerNorm kernels. Vector loops call this before leaving.
__attribute__((target("avx"))) inline void clean_upper_state() {
  _mm256_zeroupper();
}

}  // namespace kiln::simd
#endif
