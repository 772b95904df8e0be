// Kiln's own pooling kernel (kernels/pool.hip) on the host emulation against a loop in double
// over the same geometry: row-major and channels-last storage (16-byte channel vectors and
// single channels), max and average with and without count_include_pad, asymmetric pads, ceil
// mode's partial last windows, dilations, a window of padding alone, and a global window.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "backends/gpu/kernels/pool.hpp"

using namespace kiln::backends::gpu;
using namespace kiln::backends::gpu::kernels;

namespace {

struct Geometry {
  int64_t n, c, h, w, oh, ow;
  int kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

// y in NCHW order, whatever the storage.
std::vector<double> reference(const std::vector<float>& x_nchw, const Geometry& g, bool max,
                              bool include_pad, bool lowest_is_inf) {
  std::vector<double> y(g.n * g.c * g.oh * g.ow);
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        double acc = max ? (lowest_is_inf ? -INFINITY : -FLT_MAX) : 0.0;
        int real = 0, padded = 0;
        for (int r = 0; r < g.kh; ++r) {
          for (int s = 0; s < g.kw; ++s) {
            const int64_t iy = oy * g.sh - g.pt + r * g.dh, ix = ox * g.sw - g.pl + s * g.dw;
            if (iy >= -g.pt && iy < g.h + g.pb && ix >= -g.pl && ix < g.w + g.pr) ++padded;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            const double v = x_nchw[(p * g.h + iy) * g.w + ix];
            if (!max) {
              acc += v;
            } else if (real == 0 || v > acc) {
              acc = v;
            }
            ++real;
          }
        }
        if (!max) {
          const int count = include_pad ? padded : real;
          acc = count > 0 ? acc / count : 0.0;
        }
        y[(p * g.oh + oy) * g.ow + ox] = acc;
      }
    }
  }
  return y;
}

// NCHW <-> NHWC for [n, c, h, w].
std::vector<float> to_nhwc(const std::vector<float>& v, int64_t n, int64_t c, int64_t h,
                           int64_t w) {
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h * w; ++y) out[(i * h * w + y) * c + k] = v[(i * c + k) * h * w + y];
  return out;
}
std::vector<float> from_nhwc(const std::vector<float>& v, int64_t n, int64_t c, int64_t h,
                             int64_t w) {
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h * w; ++y) out[(i * c + k) * h * w + y] = v[(i * h * w + y) * c + k];
  return out;
}

void check(const char* name, const Geometry& g, bool max, bool include_pad, bool channels_last,
           bool half) {
  SCOPED_TRACE(testing::Message() << name << (channels_last ? " nhwc" : " nchw")
                                  << (half ? " f16" : " f32") << (max ? " max" : " avg"));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-3.f, 3.f);
  std::vector<float> x(g.n * g.c * g.h * g.w);
  for (float& v : x) v = half ? __half2float(__float2half(d(rng))) : d(rng);
  const std::vector<double> ref = reference(x, g, max, include_pad, half);
  const std::vector<float> stored = channels_last ? to_nhwc(x, g.n, g.c, g.h, g.w) : x;
  const size_t out_n = static_cast<size_t>(g.n * g.c * g.oh * g.ow);
  PoolArgs a;
  a.type = half ? FloatType::F16 : FloatType::F32;
  a.channels_last = channels_last;
  a.max = max;
  a.count_include_pad = include_pad;
  a.n = g.n, a.c = g.c, a.h = g.h, a.w = g.w, a.oh = g.oh, a.ow = g.ow;
  a.kh = g.kh, a.kw = g.kw, a.stride_h = g.sh, a.stride_w = g.sw, a.dil_h = g.dh, a.dil_w = g.dw;
  a.pad_top = g.pt, a.pad_left = g.pl, a.pad_bottom = g.pb, a.pad_right = g.pr;
  std::vector<float> got(out_n);
  if (half) {
    std::vector<__half> xh(stored.size()), yh(out_n, __float2half(1234.f));
    for (size_t i = 0; i < stored.size(); ++i) xh[i] = __float2half(stored[i]);
    a.x = xh.data(), a.y = yh.data();
    ASSERT_EQ(launch_pool(a, nullptr), hipSuccess);
    for (size_t i = 0; i < out_n; ++i) got[i] = __half2float(yh[i]);
  } else {
    std::vector<float> yf(out_n, 1234.f);
    a.x = stored.data(), a.y = yf.data();
    ASSERT_EQ(launch_pool(a, nullptr), hipSuccess);
    got = yf;
  }
  if (channels_last) got = from_nhwc(got, g.n, g.c, g.oh, g.ow);
  const double tol = half ? 2e-3 : 1e-5;
  for (size_t i = 0; i < out_n; ++i) {
    const double r = ref[i];
    if (std::isinf(r)) {
      ASSERT_EQ(got[i], static_cast<float>(r)) << "at " << i;
    } else {
      ASSERT_NEAR(got[i], r, tol * (1 + std::abs(r))) << "at " << i;
    }
  }
}

TEST(GpuPoolEmulated, WindowsLayoutsAndTypes) {
  // name, n c h w oh ow, kh kw sh sw dh dw, pads t l b r
  const struct {
    const char* name;
    Geometry g;
  } cases[] = {
      {"3x3 s2 p1 (16 channels: vectors)", {2, 16, 9, 9, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}},
      {"asymmetric pads, odd channels", {1, 3, 7, 8, 8, 8, 3, 3, 1, 1, 1, 1, 0, 1, 2, 1}},
      // ceil mode: (8 + 1 + 1 - 3) / 2 rounded up + 1 = 5, the last window reaches past the pad.
      {"ceil mode's partial window", {1, 8, 8, 8, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}},
      {"dilation 2", {1, 8, 10, 9, 6, 5, 2, 3, 1, 1, 2, 2, 1, 0, 1, 2}},
      // Pads larger than the window: the corner windows hold padding alone.
      {"windows of padding alone", {1, 8, 3, 3, 5, 5, 2, 2, 1, 1, 1, 1, 3, 3, 0, 0}},
      {"global 7x7", {2, 24, 7, 7, 1, 1, 7, 7, 1, 1, 1, 1, 0, 0, 0, 0}},
  };
  for (const auto& c : cases) {
    for (bool channels_last : {false, true}) {
      for (bool half : {false, true}) {
        check(c.name, c.g, true, false, channels_last, half);
        check(c.name, c.g, false, false, channels_last, half);
        check(c.name, c.g, false, true, channels_last, half);
      }
    }
  }
}

TEST(GpuPoolEmulated, RefusesInvalidWindows) {
  PoolArgs a;
  a.n = a.c = a.h = a.w = a.oh = a.ow = 1;
  a.kh = 0;
  EXPECT_EQ(launch_pool(a, nullptr), hipErrorInvalidValue);
  a.kh = 1;
  a.stride_w = 0;
  EXPECT_EQ(launch_pool(a, nullptr), hipErrorInvalidValue);
}

}  // namespace
