#include "core/half_convert.hpp"

#include <cmath>

#include "core/half.hpp"

#include "core/x86_simd.hpp"
#ifdef KILN_X86_SIMD
#define KILN_HAVE_X86_HALF 1
#endif

namespace kiln {
namespace {

void halves_to_floats_scalar(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(in[i]);
}

void floats_to_halves_scalar(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_half_bits(in[i]);
}

#ifdef KILN_HAVE_X86_HALF
using simd::clean_upper_state;

__attribute__((target("avx512f"))) void halves_to_floats_avx512(const uint16_t* in, float* out,
                                                                size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  clean_upper_state();
  halves_to_floats_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx512f"))) void floats_to_halves_avx512(const float* in, uint16_t* out,
                                                                size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  clean_upper_state();
  floats_to_halves_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void halves_to_floats_f16c(const uint16_t* in, float* out,
                                                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  clean_upper_state();
  halves_to_floats_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void floats_to_halves_f16c(const float* in, uint16_t* out,
                                                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  clean_upper_state();
  floats_to_halves_scalar(in + i, out + i, n - i);
}

// bfloat16 is float32's upper half: widening is a shift; narrowing adds 0x7fff plus the kept
// part's lowest bit (round to nearest even) and quiets NaN, as float_to_bfloat16_bits does.
__attribute__((target("avx512f,avx512bw"))) void bfloat16s_to_floats_avx512(const uint16_t* in,
                                                                            float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(wide, 16));
  }
  clean_upper_state();
  for (; i < n; ++i) out[i] = bfloat16_bits_to_float(in[i]);
}

__attribute__((target("avx512f,avx512bw"))) void floats_to_bfloat16s_avx512(const float* in,
                                                                            uint16_t* out,
                                                                            size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        simd::bfloat16_bits(_mm512_loadu_ps(in + i)));
  }
  clean_upper_state();
  for (; i < n; ++i) out[i] = float_to_bfloat16_bits(in[i]);
}

enum class Isa { Scalar, F16c, Avx512 };

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return Isa::Avx512;
  // Every AVX2 CPU has F16C; clang's __builtin_cpu_supports does not know "f16c".
  if (__builtin_cpu_supports("avx2")) return Isa::F16c;
  return Isa::Scalar;
}

Isa isa() {
  static const Isa value = detect();
  return value;
}
#endif

}  // namespace

void halves_to_floats(const uint16_t* in, float* out, size_t n) {
#ifdef KILN_HAVE_X86_HALF
  switch (isa()) {
    case Isa::Avx512:
      return halves_to_floats_avx512(in, out, n);
    case Isa::F16c:
      return halves_to_floats_f16c(in, out, n);
    case Isa::Scalar:
      break;
  }
#endif
  halves_to_floats_scalar(in, out, n);
}

void floats_to_halves(const float* in, uint16_t* out, size_t n) {
#ifdef KILN_HAVE_X86_HALF
  switch (isa()) {
    case Isa::Avx512:
      return floats_to_halves_avx512(in, out, n);
    case Isa::F16c:
      return floats_to_halves_f16c(in, out, n);
    case Isa::Scalar:
      break;
  }
#endif
  floats_to_halves_scalar(in, out, n);
}

size_t floats_to_halves_clamped(const float* in, uint16_t* out, size_t n) {
  floats_to_halves(in, out, n);
  size_t clamped = 0;
  for (size_t i = 0; i < n; ++i) {
    // Rounding may carry a value just below 65520 up to infinity too, so test the result.
    if (std::isfinite(in[i]) && (out[i] & 0x7fffu) == 0x7c00u) {
      out[i] = float_to_half_bits(std::copysign(kFloat16Max, in[i]));
      ++clamped;
    }
  }
  return clamped;
}

void bfloat16s_to_floats(const uint16_t* in, float* out, size_t n) {
#ifdef KILN_HAVE_X86_HALF
  if (isa() == Isa::Avx512) return bfloat16s_to_floats_avx512(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = bfloat16_bits_to_float(in[i]);
}

void floats_to_bfloat16s(const float* in, uint16_t* out, size_t n) {
#ifdef KILN_HAVE_X86_HALF
  if (isa() == Isa::Avx512) return floats_to_bfloat16s_avx512(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bfloat16_bits(in[i]);
}

}  // namespace kiln
