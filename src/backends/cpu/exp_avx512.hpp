#pragma once
// exp over 16 floats with AVX-512F, for the loops that need it inside a kernel (SiLU, the LSTM
// cell): v = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is exact to float
// precision), e^r by its Taylor series to r^7 (the remainder is below 1e-8 relative there), times
// 2^k by vscalefps. Valid for v >= -87.3 (inf past 88.7): callers clamp.
#include "core/x86_simd.hpp"

#ifdef KILN_X86_SIMD
namespace kiln::backends::cpu {

__attribute__((target("avx512f"))) inline __m512 exp_ps(__m512 v) {
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), v);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, k);
}

}  // namespace kiln::backends::cpu
#endif
