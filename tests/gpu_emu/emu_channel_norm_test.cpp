// gpu.batch_norm's and gpu.lrn's kernels (kernels/channel_norm.hip) on the host emulation
// against loops in double over NCHW indices, with row-major and channels-last storage.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/gpu/kernels/channel_norm.hpp"

using namespace kiln::backends::gpu::kernels;

namespace {

constexpr int64_t kN = 2, kC = 7, kHw = 6;

// [n, c, hw] <-> [n, hw, c].
std::vector<float> to_last(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t p = 0; p < kHw; ++p) out[(i * kHw + p) * kC + c] = v[(i * kC + c) * kHw + p];
  return out;
}
std::vector<float> from_last(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t p = 0; p < kHw; ++p) out[(i * kC + c) * kHw + p] = v[(i * kHw + p) * kC + c];
  return out;
}

}  // namespace

TEST(GpuChannelNormEmulated, BatchNormAndLrnInBothLayouts) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> x(kN * kC * kHw), ab(2 * kC);
  for (float& v : x) v = d(rng);
  for (float& v : ab) v = d(rng);
  const int size = 4;
  const float alpha = 0.3f, beta = 0.75f, bias = 1.5f;
  std::vector<double> bn(x.size()), lrn(x.size());
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t p = 0; p < kHw; ++p) {
        const int64_t k = (i * kC + c) * kHw + p;
        bn[k] = double(x[k]) * ab[c] + ab[kC + c];
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, c - 1); j <= std::min<int64_t>(kC - 1, c + 2); ++j)
          sq += double(x[(i * kC + j) * kHw + p]) * x[(i * kC + j) * kHw + p];
        lrn[k] = x[k] / std::pow(bias + alpha / size * sq, beta);
      }
  for (bool last : {false, true}) {
    SCOPED_TRACE(last ? "channels-last" : "row-major");
    const ChannelShape s{kN, kC, kHw, last};
    const std::vector<float> stored = last ? to_last(x) : x;
    std::vector<float> y(x.size());
    ASSERT_EQ(launch_batch_norm(FloatType::F32, stored.data(), y.data(), s, ab.data(), nullptr),
              hipSuccess);
    std::vector<float> got = last ? from_last(y) : y;
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], bn[k], 1e-5) << "bn at " << k;
    ASSERT_EQ(
        launch_lrn(FloatType::F32, stored.data(), y.data(), s, size, alpha, beta, bias, nullptr),
        hipSuccess);
    got = last ? from_last(y) : y;
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], lrn[k], 1e-5) << "lrn at " << k;
  }
}
