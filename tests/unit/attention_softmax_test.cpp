// The CPU attention's row softmax (backends/cpu/attention_softmax.hpp) against a double-precision
// softmax: every row length around the vector width (tails), masks per score and per row, and
// the special rows: a NaN term, a fully masked row, a term far below the rest.
#include "backends/cpu/attention_softmax.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/half.hpp"

namespace kiln::backends::cpu {
namespace {

std::vector<double> reference(const std::vector<float>& s, float scale, const float* mask,
                              int64_t mask_step) {
  std::vector<double> x(s.size());
  double max = -INFINITY;
  for (size_t i = 0; i < s.size(); ++i) {
    x[i] = double{s[i]} * scale + (mask ? mask[static_cast<int64_t>(i) * mask_step] : 0.0);
    max = std::max(max, x[i]);
  }
  double sum = 0;
  for (double& v : x) sum += (v = std::exp(v - max));
  for (double& v : x) v /= sum;
  return x;
}

TEST(AttentionSoftmax, MatchesDoublePrecisionForEveryTailAndMask) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-6.f, 6.f);
  for (int64_t n = 1; n <= 70; ++n) {
    for (int mask_kind = 0; mask_kind < 3; ++mask_kind) {
      std::vector<float> s(static_cast<size_t>(n)), mask(static_cast<size_t>(n));
      for (float& v : s) v = dist(rng);
      // Some scores masked out (-10000, as BERT's padding); the first value stays moderate, as
      // the whole row's mask (float32 cannot hold s * scale - 10000 to the reference's
      // precision, so a row mask of -10000 is not compared).
      for (float& v : mask) v = dist(rng) < -3.f ? -10000.f : dist(rng);
      mask[0] = dist(rng);
      const float* m = mask_kind == 0 ? nullptr : mask.data();
      const int64_t step = mask_kind == 2 ? 0 : 1;
      const std::vector<double> want = reference(s, 0.3f, m, step);
      std::vector<float> row = s;
      scaled_masked_softmax_row(row.data(), n, 0.3f, m, step);
      std::vector<float> scratch = s;
      std::vector<uint16_t> half(static_cast<size_t>(n));
      scaled_masked_softmax_row(scratch.data(), n, 0.3f, m, step, half.data());
      for (int64_t i = 0; i < n; ++i) {
        const double w = want[static_cast<size_t>(i)];
        EXPECT_NEAR(row[static_cast<size_t>(i)], w, 1e-6 + 1e-5 * w) << "n " << n << " i " << i;
        EXPECT_NEAR(bfloat16_bits_to_float(half[static_cast<size_t>(i)]), w, 0x1p-8 * w + 1e-30)
            << "bfloat16, n " << n << " i " << i;
      }
    }
  }
}

TEST(AttentionSoftmax, NanAndFullyMaskedRowsAreNanAndFarTermsAreZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {5, 16, 37, 128}) {
    std::vector<float> row(static_cast<size_t>(n), 1.f);
    row[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
    scaled_masked_softmax_row(row.data(), n, 1.f, nullptr, 1);
    for (float v : row) EXPECT_TRUE(std::isnan(v)) << "a NaN term makes the row NaN, n " << n;

    std::vector<float> masked(static_cast<size_t>(n), 0.5f), minus_inf(1, -inf);
    std::vector<uint16_t> half(static_cast<size_t>(n));
    scaled_masked_softmax_row(masked.data(), n, 1.f, minus_inf.data(), 0, half.data());
    for (uint16_t h : half) {
      EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(h))) << "0 / 0 for a fully masked row";
    }

    // One term 200 below the others: e^-200 is below float's range, exactly 0 (not subnormal).
    std::vector<float> far(static_cast<size_t>(n), 0.f);
    far[0] = -200.f;
    scaled_masked_softmax_row(far.data(), n, 1.f, nullptr, 1);
    EXPECT_EQ(far[0], 0.f);
    if (n > 1) {
      EXPECT_NEAR(far[1], 1.0 / static_cast<double>(n - 1), 1e-6);
    }
  }
}

}  // namespace
}  // namespace kiln::backends::cpu
