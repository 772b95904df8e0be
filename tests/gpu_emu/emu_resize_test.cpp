// gpu.resize's kernels (kernels/resize.hip) and walk (runtime/resize_walk.cpp) on the host
// emulation: taps made here for linear interpolation along H and W (with one output row that
// extrapolates) and nearest along C, against the same sums in double over logical NCHW indices,
// for row-major and channels-last storage on either side, float32 and float16, and the nearest
// kernel's word copies.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/gpu/kernels/resize.hpp"
#include "backends/gpu/runtime/resize_walk.hpp"

using namespace kiln::backends::gpu;
using namespace kiln::backends::gpu::kernels;

namespace {

// Taps along one dim, as the kernel reads them.
struct DimTaps {
  int taps = 0;
  std::vector<int32_t> index;
  std::vector<float> weight;
};

// Linear half_pixel taps from `in` to `out` (indices clamped), output index `outside` (if any)
// marked to extrapolate.
DimTaps linear(int64_t in, int64_t out, int64_t outside = -1) {
  DimTaps t;
  t.taps = 2;
  for (int64_t q = 0; q < out; ++q) {
    const double x = (q + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    const double f = std::floor(x);
    const auto i0 = static_cast<int64_t>(f);
    auto clamp = [&](int64_t i) {
      return static_cast<int32_t>(std::min(std::max(i, int64_t{0}), in - 1));
    };
    t.index.push_back(q == outside ? -1 : clamp(i0));
    t.index.push_back(clamp(i0 + 1));
    t.weight.push_back(static_cast<float>(1 - (x - f)));
    t.weight.push_back(static_cast<float>(x - f));
  }
  return t;
}

// Nearest taps: output index q reads (q * in) / out.
DimTaps nearest(int64_t in, int64_t out) {
  DimTaps t;
  t.taps = 1;
  for (int64_t q = 0; q < out; ++q) {
    t.index.push_back(static_cast<int32_t>(q * in / out));
    t.weight.push_back(1.f);
  }
  return t;
}

std::vector<float> to_nhwc(const std::vector<float>& v, const std::vector<int64_t>& d) {
  std::vector<float> out(v.size());
  const int64_t n = d[0], c = d[1], hw = d[2] * d[3];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < hw; ++p) out[(i * hw + p) * c + k] = v[(i * c + k) * hw + p];
  return out;
}
std::vector<float> from_nhwc(const std::vector<float>& v, const std::vector<int64_t>& d) {
  std::vector<float> out(v.size());
  const int64_t n = d[0], c = d[1], hw = d[2] * d[3];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < hw; ++p) out[(i * c + k) * hw + p] = v[(i * hw + p) * c + k];
  return out;
}

}  // namespace

TEST(GpuResizeEmulated, InterpolatesThroughEveryLayout) {
  const std::vector<int64_t> in = {2, 3, 5, 4}, out = {2, 5, 7, 6};
  const float fill = -7.5f;
  std::vector<DimTaps> dims = {DimTaps{}, nearest(3, 5), linear(5, 7, 0), linear(4, 6)};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> x(2 * 3 * 5 * 4);
  for (float& v : x) v = __half2float(__float2half(dist(rng)));
  // The reference over logical indices.
  std::vector<double> ref;
  for (int64_t n = 0; n < out[0]; ++n)
    for (int64_t c = 0; c < out[1]; ++c)
      for (int64_t h = 0; h < out[2]; ++h)
        for (int64_t w = 0; w < out[3]; ++w) {
          if (dims[2].index[h * 2] < 0) {
            ref.push_back(fill);
            continue;
          }
          const int64_t ci = dims[1].index[c];
          double sum = 0;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) {
              const int64_t hi = dims[2].index[h * 2 + a], wi = dims[3].index[w * 2 + b];
              sum += double(dims[2].weight[h * 2 + a]) * dims[3].weight[w * 2 + b] *
                     x[((n * in[1] + ci) * in[2] + hi) * in[3] + wi];
            }
          ref.push_back(sum);
        }
  std::vector<ResizeDim> taps(4);
  for (size_t d = 0; d < 4; ++d)
    taps[d] = {dims[d].taps, dims[d].index.empty() ? nullptr : dims[d].index.data(),
               dims[d].weight.empty() ? nullptr : dims[d].weight.data()};
  for (bool x_last : {false, true}) {
    for (bool y_last : {false, true}) {
      for (bool half : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << (x_last ? "x nhwc" : "x nchw") << (y_last ? ", y nhwc" : ", y nchw")
                     << (half ? ", f16" : ", f32"));
        const ResizeWalk walk = make_resize_walk(in, out, taps, x_last, y_last);
        const std::vector<float> stored = x_last ? to_nhwc(x, in) : x;
        std::vector<float> got(ref.size());
        if (half) {
          std::vector<__half> xh(stored.size()), yh(ref.size(), __float2half(1234.f));
          for (size_t i = 0; i < stored.size(); ++i) xh[i] = __float2half(stored[i]);
          ASSERT_EQ(
              launch_resize_interpolate(FloatType::F16, xh.data(), yh.data(),
                                        static_cast<int64_t>(ref.size()), walk, fill, nullptr),
              hipSuccess);
          for (size_t i = 0; i < ref.size(); ++i) got[i] = __half2float(yh[i]);
        } else {
          ASSERT_EQ(
              launch_resize_interpolate(FloatType::F32, stored.data(), got.data(),
                                        static_cast<int64_t>(ref.size()), walk, fill, nullptr),
              hipSuccess);
        }
        if (y_last) got = from_nhwc(got, out);
        const double tol = half ? 2e-3 : 1e-6;
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], tol * (1 + std::abs(ref[i]))) << "at " << i;
      }
    }
  }
}

TEST(GpuResizeEmulated, NearestCopiesWordsAndFills) {
  // int64 elements [3, 4] -> [5, 2]: rows nearest, columns nearest, row 4 extrapolates.
  const std::vector<int64_t> in = {3, 4}, out = {5, 2};
  DimTaps rows = nearest(3, 5), cols = nearest(4, 2);
  rows.index[4] = -1;
  std::vector<int64_t> x(12);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (int64_t{1} << 40) + static_cast<int64_t>(i);
  const std::vector<ResizeDim> taps = {{1, rows.index.data(), rows.weight.data()},
                                       {1, cols.index.data(), cols.weight.data()}};
  const ResizeWalk walk = make_resize_walk(in, out, taps, false, false);
  std::vector<int64_t> y(10, 0);
  ASSERT_EQ(launch_resize_nearest(8, x.data(), y.data(), 10, walk, 99, nullptr), hipSuccess);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 2; ++c) {
      const int64_t want = r == 4 ? 99 : x[rows.index[r] * 4 + cols.index[c]];
      EXPECT_EQ(y[r * 2 + c], want) << r << "," << c;
    }
  // A size the kernel has no word for is refused.
  EXPECT_NE(launch_resize_nearest(3, x.data(), y.data(), 10, walk, 0, nullptr), hipSuccess);
}
