#include "backends/cpu/norm_row.hpp"

#include <cmath>
#include <type_traits>

#include "core/half.hpp"
#include "core/x86_simd.hpp"

namespace kiln::backends::cpu {
namespace {

float widen(float v) {
  return v;
}
float widen(uint16_t v) {
  return bfloat16_bits_to_float(v);
}
void narrow(float v, float* out) {
  *out = v;
}
void narrow(float v, uint16_t* out) {
  *out = float_to_bfloat16_bits(v);
}

template <typename T>
void norm_row_portable(const NormRow& r, const T* x, const T* skip, T* y, T* sum, float* s) {
  const int64_t n = r.n;
  for (int64_t i = 0; i < n; ++i) {
    float v = widen(x[i]);
    if (skip) v += widen(skip[i]);
    if (r.bias) v += r.bias[i];
    s[i] = v;
    if (sum) narrow(v, sum + i);
  }
  float part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) part[l] += s[i + l];
  }
  double total = 0;
  for (float p : part) total += p;
  for (; i < n; ++i) total += s[i];
  const auto mean = static_cast<float>(total / static_cast<double>(n));
  double squares = 0;
  for (i = 0; i < n; ++i) squares += static_cast<double>(s[i] - mean) * (s[i] - mean);
  const auto inv = static_cast<float>(
      1.0 / std::sqrt(squares / static_cast<double>(n) + static_cast<double>(r.epsilon)));
  for (i = 0; i < n; ++i) {
    const float g = r.gamma ? r.gamma[i] : 1.f, b = r.beta ? r.beta[i] : 0.f;
    narrow((s[i] - mean) * inv * g + b, y + i);
  }
}

#ifdef KILN_X86_SIMD
using simd::clean_upper_state;

// 16 (or the masked tail's) elements widened to float32.
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) __m512 load(const T* p, __mmask16 m) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m256i bits = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
}

// bfloat16 rounded as float_to_bfloat16_bits (simd::bfloat16_bits).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void store(T* p, __m512 v, __mmask16 m) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, m, v);
  } else {
    _mm256_mask_storeu_epi16(p, m, simd::bfloat16_bits(v));
  }
}

__attribute__((target("avx512f"))) inline __mmask16 lanes(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << static_cast<unsigned>(left)) - 1);
}

template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void norm_row_avx512(const NormRow& r,
                                                                          const T* x, const T* skip,
                                                                          T* y, T* sum, float* s) {
  const int64_t n = r.n;
  __m512 total = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    __m512 v = load(x + i, m);
    if (skip) v = _mm512_add_ps(v, load(skip + i, m));
    if (r.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r.bias + i));
    _mm512_mask_storeu_ps(s + i, m, v);
    if (sum && static_cast<void*>(sum) != static_cast<void*>(s)) store(sum + i, v, m);
    total = _mm512_add_ps(total, v);
  }
  alignas(64) float part[16];
  _mm512_store_ps(part, total);
  double t = 0;
  for (float p : part) t += p;
  const auto mean = static_cast<float>(t / static_cast<double>(n));
  const __m512 vmean = _mm512_set1_ps(mean);
  __m512 sq = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    // Lanes past the row's end stay 0 (not -mean).
    const __mmask16 m = lanes(n - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, s + i), vmean);
    sq = _mm512_fmadd_ps(d, d, sq);
  }
  _mm512_store_ps(part, sq);
  double squares = 0;
  for (float p : part) squares += p;
  const __m512 inv = _mm512_set1_ps(static_cast<float>(
      1.0 / std::sqrt(squares / static_cast<double>(n) + static_cast<double>(r.epsilon))));
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 norm = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vmean), inv);
    const __m512 g = r.gamma ? _mm512_maskz_loadu_ps(m, r.gamma + i) : one;
    const __m512 b = r.beta ? _mm512_maskz_loadu_ps(m, r.beta + i) : _mm512_setzero_ps();
    store(y + i, _mm512_fmadd_ps(norm, g, b), m);
  }
  clean_upper_state();
}

bool has_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
}
#endif

template <typename T>
void norm_row_any(const NormRow& r, const T* x, const T* skip, T* y, T* sum, float* scratch) {
  if (r.n <= 0) return;
#ifdef KILN_X86_SIMD
  if (has_avx512()) return norm_row_avx512(r, x, skip, y, sum, scratch);
#endif
  norm_row_portable(r, x, skip, y, sum, scratch);
}

}  // namespace

void norm_row(const NormRow& r, const float* x, const float* skip, float* y, float* sum,
              float* scratch) {
  norm_row_any(r, x, skip, y, sum, scratch);
}
void norm_row(const NormRow& r, const uint16_t* x, const uint16_t* skip, uint16_t* y, uint16_t* sum,
              float* scratch) {
  norm_row_any(r, x, skip, y, sum, scratch);
}

}  // namespace kiln::backends::cpu
