#include "backends/cpu/gelu_loop.hpp"

#include <cmath>

#include "core/x86_simd.hpp"

namespace kiln::backends::cpu {
namespace {

void gelu_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678118654752f));
  }
}

#ifdef KILN_X86_SIMD
using simd::clean_upper_state;

// erf(z) ~ z P(z^2) / Q(z^2) on [-4, 4], fitted here to erf's values (least squares, iterated
// to weight the relative error: 1.3e-7 in double, 4e-7 evaluated in float32). A rational
// function needs 12 multiply-adds and one division; the exp-based form of oneDNN's injector
// (Abramowitz-Stegun 7.1.26) about twice as many operations.
constexpr float kP[] = {1.128379161e+00f, 1.857629729e-01f, 5.216521510e-02f,
                        3.578843261e-03f, 2.827112444e-04f, 2.109066368e-06f};
constexpr float kQ[] = {
    1.f, 4.979612798e-01f, 1.122185315e-01f, 1.458844347e-02f, 1.121373238e-03f, 3.859757105e-05f};

__attribute__((target("avx512f"))) inline __m512 gelu16(__m512 x) {
  const __m512 bound = _mm512_set1_ps(4.f);
  __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  // Clamped (erf(4) is 1 - 1.5e-8); a NaN stays NaN through x below.
  z = _mm512_min_ps(_mm512_max_ps(z, _mm512_sub_ps(_mm512_setzero_ps(), bound)), bound);
  const __m512 t = _mm512_mul_ps(z, z);
  __m512 p = _mm512_set1_ps(kP[5]), q = _mm512_set1_ps(kQ[5]);
  for (int k = 4; k >= 0; --k) {
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kP[k]));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kQ[k]));
  }
  // Held within [-1, 1], so that a large negative x gives exactly 0, not |x| times the fit's
  // error.
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 erf = _mm512_min_ps(
      _mm512_max_ps(_mm512_div_ps(_mm512_mul_ps(z, p), q), _mm512_sub_ps(_mm512_setzero_ps(), one)),
      one);
  const __m512 half_x = _mm512_mul_ps(x, _mm512_set1_ps(0.5f));
  return _mm512_fmadd_ps(half_x, erf, half_x);
}

__attribute__((target("avx512f"))) void gelu_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, tail, gelu16(_mm512_maskz_loadu_ps(tail, x + i)));
  }
  clean_upper_state();
}
#endif

}  // namespace

void gelu_in_place(float* x, int64_t n) {
#ifdef KILN_X86_SIMD
  if (simd::has_avx512f()) return gelu_avx512(x, n);
#endif
  gelu_portable(x, n);
}

}  // namespace kiln::backends::cpu
