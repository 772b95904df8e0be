#include "backends/cpu/quantize_loops.hpp"

#include <type_traits>

#include "core/x86_simd.hpp"

namespace kiln::backends::cpu {
namespace {

template <typename Q>
constexpr float kLow = std::is_same_v<Q, uint8_t> ? 0.f : -128.f;
template <typename Q>
constexpr float kHigh = std::is_same_v<Q, uint8_t> ? 255.f : 127.f;

template <typename X, typename Q>
void quantize_portable(const X* x, Q* y, int64_t n, float scale, float zero) {
  // Rounding to nearest, ties to even: adding and taking away 1.5 * 2^23 rounds a float of
  // magnitude below 2^22 in the default rounding mode; larger ones saturate either way.
  constexpr float kRound = 12582912.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float q = static_cast<float>(x[i]) / scale;
    float v = ((q + kRound) - kRound) + zero;
    v = v == v ? v : 0.f;  // NaN to 0, as the reference's
    v = v > kLow<Q> ? v : kLow<Q>;
    v = v < kHigh<Q> ? v : kHigh<Q>;
    y[i] = static_cast<Q>(static_cast<int32_t>(v));
  }
}

template <typename Q>
void dequantize_portable(const Q* x, float* y, int64_t n, float scale, int32_t zero) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zero) * scale;
}

#ifdef KILN_X86_SIMD
using simd::clean_upper_state;

// 16 elements of x widened to float32 (exact for both 16-bit types).
template <typename X>
__attribute__((target("avx512f"))) __m512 load16(const X* x) {
  if constexpr (std::is_same_v<X, float>) {
    return _mm512_loadu_ps(x);
  } else {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    if constexpr (std::is_same_v<X, Float16>) {
      return _mm512_cvtph_ps(bits);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
}

// The same numerics 16 at a time: the division in float32, the rounding to nearest even as
// roundscale does it (exact, as the portable loop's addition is below 2^22; above, both
// saturate), NaN cleared before the saturation.
template <typename X, typename Q>
__attribute__((target("avx512f"))) void quantize_avx512(const X* x, Q* y, int64_t n, float scale,
                                                        float zero) {
  const __m512 vs = _mm512_set1_ps(scale), vz = _mm512_set1_ps(zero);
  const __m512 lo = _mm512_set1_ps(kLow<Q>), hi = _mm512_set1_ps(kHigh<Q>);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 q = _mm512_div_ps(load16(x + i), vs);
    __m512 v =
        _mm512_add_ps(_mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m128i bytes = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), bytes);
  }
  clean_upper_state();
  quantize_portable(x + i, y + i, n - i, scale, zero);
}

template <typename Q>
__attribute__((target("avx512f"))) void dequantize_avx512(const Q* x, float* y, int64_t n,
                                                          float scale, int32_t zero) {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i vz = _mm512_set1_epi32(zero);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m512i wide =
        std::is_same_v<Q, uint8_t> ? _mm512_cvtepu8_epi32(bytes) : _mm512_cvtepi8_epi32(bytes);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(wide, vz)), vs));
  }
  clean_upper_state();
  dequantize_portable(x + i, y + i, n - i, scale, zero);
}
#endif

// NaN leaves the range as it is (the comparison is false), as std::min / std::max keep it.
void range_portable(const float* x, int64_t n, float& lo, float& hi) {
  for (int64_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
}

#ifdef KILN_X86_SIMD
// vminps / vmaxps return their second operand when either is NaN: the range's lanes stay.
__attribute__((target("avx512f"))) void range_avx512(const float* x, int64_t n, float& lo,
                                                     float& hi) {
  __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    vlo = _mm512_min_ps(v, vlo);
    vhi = _mm512_max_ps(v, vhi);
  }
  lo = _mm512_reduce_min_ps(vlo);
  hi = _mm512_reduce_max_ps(vhi);
  clean_upper_state();
  range_portable(x + i, n - i, lo, hi);
}
#endif

template <typename X, typename Q>
void quantize_any(const X* x, Q* y, int64_t n, float scale, float zero) {
#ifdef KILN_X86_SIMD
  if (simd::has_avx512f()) return quantize_avx512(x, y, n, scale, zero);
#endif
  quantize_portable(x, y, n, scale, zero);
}

template <typename Q>
void dequantize_any(const Q* x, float* y, int64_t n, float scale, int32_t zero) {
#ifdef KILN_X86_SIMD
  if (simd::has_avx512f()) return dequantize_avx512(x, y, n, scale, zero);
#endif
  dequantize_portable(x, y, n, scale, zero);
}

}  // namespace

void quantize_to_u8(const float* x, uint8_t* y, int64_t n, float scale, float zero) {
  quantize_any(x, y, n, scale, zero);
}
void range_with_zero(const float* x, int64_t n, float& lo, float& hi) {
  lo = 0.f;
  hi = 0.f;
#ifdef KILN_X86_SIMD
  if (simd::has_avx512f()) return range_avx512(x, n, lo, hi);
#endif
  range_portable(x, n, lo, hi);
}
void quantize_to_s8(const float* x, int8_t* y, int64_t n, float scale, float zero) {
  quantize_any(x, y, n, scale, zero);
}
void quantize_to_u8(const BFloat16* x, uint8_t* y, int64_t n, float scale, float zero) {
  quantize_any(x, y, n, scale, zero);
}
void quantize_to_s8(const BFloat16* x, int8_t* y, int64_t n, float scale, float zero) {
  quantize_any(x, y, n, scale, zero);
}
void quantize_to_u8(const Float16* x, uint8_t* y, int64_t n, float scale, float zero) {
  quantize_any(x, y, n, scale, zero);
}
void quantize_to_s8(const Float16* x, int8_t* y, int64_t n, float scale, float zero) {
  quantize_any(x, y, n, scale, zero);
}
void dequantize_from_u8(const uint8_t* x, float* y, int64_t n, float scale, int32_t zero) {
  dequantize_any(x, y, n, scale, zero);
}
void dequantize_from_s8(const int8_t* x, float* y, int64_t n, float scale, int32_t zero) {
  dequantize_any(x, y, n, scale, zero);
}

}  // namespace kiln::backends::cpu
