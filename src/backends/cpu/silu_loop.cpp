#include "backends/cpu/silu_loop.hpp"

#include <cmath>

#include "core/x86_simd.hpp"

namespace kiln::backends::cpu {
namespace {

void silu_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.f + std::exp(-x[i]));
}

#ifdef KILN_X86_SIMD
using simd::clean_upper_state;

// exp(v) for v >= -87.3 (inf past 88.7): v = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r
// is exact to float precision), e^r by its Taylor series to r^7 (the remainder is below 1e-8
// relative there), times 2^k by vscalefps.
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

__attribute__((target("avx512f"))) void silu_avx512(float* x, int64_t n) {
  // -x held above -87.3 (below, sigmoid is 1 to float precision; +inf's -x would make the range
  // reduction NaN); above 88.7 exp overflows to inf and x / inf is 0 (NaN for x = -inf, as the
  // reference's -inf * 0). NaN stays NaN through the numerator.
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __m512 one = _mm512_set1_ps(1.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 neg = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), v), lo);
    _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(one, exp_ps(neg))));
  }
  clean_upper_state();
  silu_portable(x + i, n - i);
}
#endif

}  // namespace

void silu_in_place(float* x, int64_t n) {
#ifdef KILN_X86_SIMD
  if (simd::has_avx512f()) return silu_avx512(x, n);
#endif
  silu_portable(x, n);
}

}  // namespace kiln::backends::cpu
