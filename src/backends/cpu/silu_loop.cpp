#include "backends/cpu/silu_loop.hpp"

#include <cmath>

#include "backends/cpu/exp_avx512.hpp"
#include "core/x86_simd.hpp"

namespace kiln::backends::cpu {
namespace {

void silu_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.f + std::exp(-x[i]));
}

#ifdef KILN_X86_SIMD
using simd::clean_upper_state;

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
