// Kiln's SiLU loop (backends/cpu/silu_loop) against x * sigmoid(x) in double: every float32
// step over [-100, 100], the edges of its exp range, infinities, NaN, zeros and subnormals, and
// lengths that leave a tail for the scalar loop (results below 1e-35 may flush to 0).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/silu_loop.hpp"
#include "ops/point_ops.hpp"

namespace kiln {
namespace {

TEST(SiluLoop, MatchesTheReferenceWithinTwoUlps) {
  std::vector<float> xs;
  for (float v = -100.f; v <= 100.f; v += 0.0137f) xs.push_back(v);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, 1e-40f, -1e-40f, -87.3f, -87.4f, 88.7f, 88.8f, -88.8f, 87.4f, 1e30f,
                  -1e30f, inf, -inf, std::nanf("")}) {
    xs.push_back(v);
  }
  xs.push_back(3.f);  // an odd length: a scalar tail after the vectors
  std::vector<float> got = xs;
  backends::cpu::silu_in_place(got.data(), static_cast<int64_t>(got.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = point::silu(static_cast<double>(xs[i]));
    const float w = static_cast<float>(want);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got[i])) << "x " << xs[i] << ": " << got[i];
      continue;
    }
    if (std::isinf(w)) {
      EXPECT_EQ(got[i], w) << "x " << xs[i];
      continue;
    }
    EXPECT_LE(std::abs(static_cast<double>(got[i]) - want), 2.4e-7 * std::abs(want) + 1e-35)
        << "x " << xs[i] << ": " << got[i] << " vs " << want;
  }
}

}  // namespace
}  // namespace kiln
