#include "backends/cpu/attention_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/exp_avx512.hpp"
#include "core/half_convert.hpp"
#include "core/x86_simd.hpp"

namespace kiln::backends::cpu {
namespace {

void softmax_row_portable(float* row, int64_t n, float scale, const float* mask, int64_t mask_step,
                          uint16_t* bf16_out) {
  // A NaN term is skipped by the maximum but makes its exp, the sum and so every term NaN.
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    row[i] = row[i] * scale + (mask ? mask[i * mask_step] : 0.f);
    max = std::max(max, row[i]);
  }
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    row[i] = std::exp(row[i] - max);
    sum += row[i];
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) row[i] *= inv;
  if (bf16_out) floats_to_bfloat16s(row, bf16_out, static_cast<size_t>(n));
}

#ifdef KILN_X86_SIMD
using simd::clean_upper_state;

// Horizontal maximum and sum by halving shuffles (GCC 12's _mm512_reduce_* start from
// _mm256_undefined_*(), which -Wuninitialized reports).
__attribute__((target("avx512f"))) inline float lanes_max(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4e));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0xb1));
  return _mm512_cvtss_f32(v);
}
__attribute__((target("avx512f"))) inline float lanes_sum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));
  return _mm512_cvtss_f32(v);
}

// The lanes of the 16 from i that lie inside a row of n (the tail's).
inline __mmask16 tail_lanes(int64_t n, int64_t i) {
  return static_cast<__mmask16>((1u << (n - i)) - 1);
}

// Pass 3 into bfloat16: vcvtneps2bf16 rounds to nearest even, as floats_to_bfloat16s does.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void scale_to_bf16(const float* row,
                                                                                   int64_t n,
                                                                                   __m512 inv,
                                                                                   uint16_t* out) {
  const int64_t full = n & ~int64_t{15};
  int64_t i = 0;
  for (; i < full; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(row + i), inv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
  if (i < n) {
    const __mmask16 lanes = tail_lanes(n, i);
    const __m256bh h =
        _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, row + i), inv));
    _mm256_mask_storeu_epi16(out + i, lanes, reinterpret_cast<const __m256i&>(h));
  }
}

__attribute__((target("avx512f"))) void softmax_row_avx512(float* row, int64_t n, float scale,
                                                           const float* mask, int64_t mask_step,
                                                           uint16_t* bf16_out) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 row_mask = _mm512_set1_ps(mask && mask_step == 0 ? mask[0] : 0.f);
  const float* lane_mask = mask && mask_step != 0 ? mask : nullptr;
  const int64_t full = n & ~int64_t{15};
  // Pass 1: the maximum of the scaled, masked scores (recomputed in pass 2, not stored: that
  // costs less than a store). max_ps drops a NaN, but pass 2 finds it again: NaN - max is NaN,
  // and so is the sum that every probability is divided by.
  __m512 max0 = _mm512_set1_ps(-INFINITY), max1 = max0;
  int64_t i = 0;
  for (; i + 32 <= full; i += 32) {
    const __m512 m0 = lane_mask ? _mm512_loadu_ps(lane_mask + i) : row_mask;
    const __m512 m1 = lane_mask ? _mm512_loadu_ps(lane_mask + i + 16) : row_mask;
    max0 = _mm512_max_ps(max0, _mm512_fmadd_ps(_mm512_loadu_ps(row + i), vscale, m0));
    max1 = _mm512_max_ps(max1, _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 16), vscale, m1));
  }
  for (; i < n; i += 16) {
    const __mmask16 lanes = i < full ? __mmask16(0xffff) : tail_lanes(n, i);
    const __m512 m = lane_mask ? _mm512_maskz_loadu_ps(lanes, lane_mask + i) : row_mask;
    const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lanes, row + i), vscale, m);
    max0 = _mm512_mask_max_ps(max0, lanes, max0, x);
  }
  const __m512 vmax = _mm512_set1_ps(lanes_max(_mm512_max_ps(max0, max1)));
  // Pass 2: exp(x - max). Terms below e^-87.3 (exp_ps's range, where results turn subnormal
  // and slow every later use) are 0; NaN is kept (the unordered compare keeps its lane).
  // -inf - (-inf) is NaN: a fully masked row is NaN, as 0 / 0.
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const auto exp_term = [&](__m512 s, __m512 m) __attribute__((target("avx512f"))) {
    const __m512 d = _mm512_sub_ps(_mm512_fmadd_ps(s, vscale, m), vmax);
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, lo, _CMP_NLT_UQ),
                               exp_ps(_mm512_max_ps(lo, d)));
  };
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  for (i = 0; i + 32 <= full; i += 32) {
    const __m512 m0 = lane_mask ? _mm512_loadu_ps(lane_mask + i) : row_mask;
    const __m512 m1 = lane_mask ? _mm512_loadu_ps(lane_mask + i + 16) : row_mask;
    const __m512 e0 = exp_term(_mm512_loadu_ps(row + i), m0);
    const __m512 e1 = exp_term(_mm512_loadu_ps(row + i + 16), m1);
    _mm512_storeu_ps(row + i, e0);
    _mm512_storeu_ps(row + i + 16, e1);
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
  }
  for (; i < n; i += 16) {
    const __mmask16 lanes = i < full ? __mmask16(0xffff) : tail_lanes(n, i);
    const __m512 m = lane_mask ? _mm512_maskz_loadu_ps(lanes, lane_mask + i) : row_mask;
    const __m512 e = exp_term(_mm512_maskz_loadu_ps(lanes, row + i), m);
    _mm512_mask_storeu_ps(row + i, lanes, e);
    sum0 = _mm512_mask_add_ps(sum0, lanes, sum0, e);
  }
  const __m512 inv = _mm512_set1_ps(1.f / lanes_sum(_mm512_add_ps(sum0, sum1)));
  if (bf16_out && simd::has_avx512bf16()) {
    scale_to_bf16(row, n, inv, bf16_out);
    clean_upper_state();
    return;
  }
  for (i = 0; i < full; i += 16) {
    _mm512_storeu_ps(row + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), inv));
  }
  if (i < n) {
    const __mmask16 lanes = tail_lanes(n, i);
    _mm512_mask_storeu_ps(row + i, lanes,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, row + i), inv));
  }
  clean_upper_state();
  if (bf16_out) floats_to_bfloat16s(row, bf16_out, static_cast<size_t>(n));
}
#endif

}  // namespace

void scaled_masked_softmax_row(float* row, int64_t n, float scale, const float* mask,
                               int64_t mask_step, uint16_t* bf16_out) {
  if (n <= 0) return;
#ifdef KILN_X86_SIMD
  if (simd::has_avx512f()) return softmax_row_avx512(row, n, scale, mask, mask_step, bf16_out);
#endif
  softmax_row_portable(row, n, scale, mask, mask_step, bf16_out);
}

}  // namespace kiln::backends::cpu
