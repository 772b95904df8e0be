#pragma once
// One row of LayerNormalization or SkipLayerNormalization, float32 or bfloat16, in three passes
// over the row: the sum x (+ skip) (+ bias) written to float32 scratch while its total is
// accumulated, the squared deviations, then the scaled result in the row's type. AVX-512 where
// the CPU has it (picked at run time); BERT-base's 768-wide rows had taken eight passes
// (widening, adding, the mean, the variance, scaling, narrowing), 60-70 us a node at one thread
// against OpenVINO's 33 for its Add and MVN.
#include <cstdint>

namespace kiln::backends::cpu {

struct NormRow {
  int64_t n = 0;  // elements in the row
  float epsilon = 1e-5f;
  const float* gamma = nullptr;  // n scales, or null (1)
  const float* beta = nullptr;   // n shifts, or null (0)
  const float* bias = nullptr;   // SkipLayerNormalization's n-element bias, or null
};

// y = (s - mean(s)) / sqrt(var(s) + epsilon) * gamma + beta with s = x + skip + bias (skip and
// bias when not null), mean and variance over the row (totals of 16 float32 lanes added in
// double); `sum` (when not null) receives s. `scratch` holds n floats (may be `sum` in the
// float32 form; y may be x).
void norm_row(const NormRow& r, const float* x, const float* skip, float* y, float* sum,
              float* scratch);
// The same over bfloat16 rows (bits): s and the statistics in float32, y and sum rounded once.
void norm_row(const NormRow& r, const uint16_t* x, const uint16_t* skip, uint16_t* y, uint16_t* sum,
              float* scratch);

}  // namespace kiln::backends::cpu
