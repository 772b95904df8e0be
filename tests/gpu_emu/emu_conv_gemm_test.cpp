// Kiln's own GEMM as an implicit-GEMM convolution (GemmArgs::conv_a, gemm_kernel.hpp's
// ConvStager) on the host emulation against a direct convolution in double: channels-last
// input, [n][r][s][c] filters, padding (asymmetric too), strides, dilations, the 16-byte
// staging (channels a multiple of 16 bytes) and the element-wise one (3 channels), bias beside a
// residual C, activations, split-K, every block tile (forced), and the launcher's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/gpu/kernels/gemm.hpp"
#include "ops/point_ops.hpp"

using namespace kiln::backends::gpu::kernels;

namespace {

struct Conv {
  int64_t images, h, w, c, filters;
  int r, s;
  int stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool bias = false, residual = false;
  GemmActivation act = GemmActivation::None;
  const char* tile = nullptr;
  bool split = false;
  int multiprocessors = 1000;

  int64_t oh() const { return (h + pad_top + pad_bottom - dil_h * (r - 1) - 1) / stride_h + 1; }
  int64_t ow() const { return (w + pad_left + pad_right - dil_w * (s - 1) - 1) / stride_w + 1; }
};

std::vector<float> random_values(size_t n, bool half, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = half ? __half2float(__float2half(d(rng))) : d(rng);
  return v;
}

std::vector<__half> to_halves(const std::vector<float>& f) {
  std::vector<__half> h;
  for (float v : f) h.push_back(__float2half(v));
  return h;
}

GemmArgs conv_args(const Conv& cv, FloatType type) {
  GemmArgs args;
  args.type = type;
  args.m = cv.images * cv.oh() * cv.ow();
  args.n = cv.filters;
  args.k = int64_t{cv.r} * cv.s * cv.c;
  args.trans_b = true;
  args.conv_a = true;
  args.conv = {.h = cv.h,
               .w = cv.w,
               .c = cv.c,
               .oh = cv.oh(),
               .ow = cv.ow(),
               .r = cv.r,
               .s = cv.s,
               .stride_h = cv.stride_h,
               .stride_w = cv.stride_w,
               .pad_top = cv.pad_top,
               .pad_left = cv.pad_left,
               .dil_h = cv.dil_h,
               .dil_w = cv.dil_w};
  args.activation = cv.act;
  args.matrix_tiles = type == FloatType::F16;
  args.multiprocessors = cv.multiprocessors;
  args.tile = cv.tile;
  return args;
}

void check(const Conv& cv, FloatType type, const std::string& what) {
  SCOPED_TRACE(what);
  const bool half = type == FloatType::F16;
  std::mt19937 rng(11);
  const int64_t oh = cv.oh(), ow = cv.ow();
  const int64_t k = int64_t{cv.r} * cv.s * cv.c, m = cv.images * oh * ow;
  std::vector<float> x = random_values(size_t(cv.images * cv.h * cv.w * cv.c), half, rng);
  std::vector<float> wt = random_values(size_t(cv.filters * k), half, rng);
  std::vector<float> bias = random_values(size_t(cv.filters), half, rng);
  std::vector<float> z = random_values(size_t(m * cv.filters), half, rng);

  std::vector<double> ref(size_t(m * cv.filters));
  for (int64_t img = 0; img < cv.images; ++img) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t xo = 0; xo < ow; ++xo) {
        const int64_t row = (img * oh + y) * ow + xo;
        for (int64_t f = 0; f < cv.filters; ++f) {
          double acc = 0;
          for (int r = 0; r < cv.r; ++r) {
            for (int s = 0; s < cv.s; ++s) {
              const int64_t ih = y * cv.stride_h - cv.pad_top + r * cv.dil_h;
              const int64_t iw = xo * cv.stride_w - cv.pad_left + s * cv.dil_w;
              if (ih < 0 || ih >= cv.h || iw < 0 || iw >= cv.w) continue;
              for (int64_t ch = 0; ch < cv.c; ++ch) {
                acc += double(x[size_t(((img * cv.h + ih) * cv.w + iw) * cv.c + ch)]) *
                       wt[size_t(((f * cv.r + r) * cv.s + s) * cv.c + ch)];
              }
            }
          }
          if (cv.bias) acc += bias[size_t(f)];
          if (cv.residual) acc += z[size_t(row * cv.filters + f)];
          if (cv.act == GemmActivation::Relu) acc = kiln::point::relu(acc);
          if (cv.act == GemmActivation::Silu) acc = kiln::point::silu(acc);
          ref[size_t(row * cv.filters + f)] = acc;
        }
      }
    }
  }

  GemmArgs args = conv_args(cv, type);
  std::vector<float> y(ref.size());
  std::vector<__half> xh, wh, bh, zh, yh(ref.size());
  if (half) {
    xh = to_halves(x), wh = to_halves(wt), bh = to_halves(bias), zh = to_halves(z);
    args.a = xh.data(), args.b = wh.data(), args.y = yh.data();
    args.bias = cv.bias ? bh.data() : nullptr;
    args.c = cv.residual ? zh.data() : nullptr;
  } else {
    args.a = x.data(), args.b = wt.data(), args.y = y.data();
    args.bias = cv.bias ? bias.data() : nullptr;
    args.c = cv.residual ? z.data() : nullptr;
  }
  if (cv.residual) args.beta = 1.f, args.c_row_stride = cv.filters, args.c_col_stride = 1;
  std::vector<float> partials;
  if (cv.split) {
    partials.assign(size_t(gemm_partial_floats(args)), std::nanf(""));
    args.partials = partials.data();
    args.partial_capacity = int64_t(partials.size());
    ASSERT_GT(gemm_splits(args), 1);
  }
  ASSERT_EQ(launch_gemm(args, nullptr), hipSuccess);
  if (half) {
    for (size_t i = 0; i < y.size(); ++i) y[i] = __half2float(yh[i]);
  }
  const double rtol = half ? 1.5e-3 : 1e-5, atol = half ? 2e-3 : 1e-5 * std::max(1.0, k / 64.0);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double e = std::abs(y[i] - ref[i]) / (atol + rtol * std::abs(ref[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, 1.0) << "worst at " << at << ": " << y[at] << " vs " << ref[at] << " ("
                        << gemm_tile_name(args) << ")";
}

void check_both(const Conv& cv, const std::string& what) {
  check(cv, FloatType::F32, what + " f32");
  check(cv, FloatType::F16, what + " f16 matrix");
}

}  // namespace

TEST(GpuConvGemmEmulated, ThreeByThreeWithBiasResidualRelu) {
  // 16 channels: 16-byte chunks of one tap in float16 and float32.
  check_both({.images = 2,
              .h = 7,
              .w = 6,
              .c = 16,
              .filters = 24,
              .r = 3,
              .s = 3,
              .pad_top = 1,
              .pad_left = 1,
              .pad_bottom = 1,
              .pad_right = 1,
              .bias = true,
              .residual = true,
              .act = GemmActivation::Relu},
             "3x3 pad 1");
}

TEST(GpuConvGemmEmulated, StridesDilationsAsymmetricPads) {
  check_both({.images = 1,
              .h = 11,
              .w = 9,
              .c = 8,
              .filters = 40,
              .r = 3,
              .s = 3,
              .stride_h = 2,
              .stride_w = 1,
              .dil_h = 1,
              .dil_w = 2,
              .pad_top = 1,
              .pad_left = 0,
              .pad_bottom = 0,
              .pad_right = 2,
              .bias = true,
              .act = GemmActivation::Silu},
             "strided, dilated, asymmetric pads");
}

TEST(GpuConvGemmEmulated, FewChannelsStagedElementByElement) {
  // A network's first layer: 3 channels, 7x7 stride 2 pad 3.
  check_both({.images = 2,
              .h = 13,
              .w = 12,
              .c = 3,
              .filters = 16,
              .r = 7,
              .s = 7,
              .stride_h = 2,
              .stride_w = 2,
              .pad_top = 3,
              .pad_left = 3,
              .pad_bottom = 3,
              .pad_right = 3,
              .bias = true,
              .act = GemmActivation::Relu},
             "7x7 stem");
}

TEST(GpuConvGemmEmulated, SplitKCarriesTheBias) {
  // A 1x1 convolution over few pixels and many channels: the reduction is split and the bias
  // is added where the parts are summed.
  check_both({.images = 1,
              .h = 2,
              .w = 3,
              .c = 512,
              .filters = 24,
              .r = 1,
              .s = 1,
              .bias = true,
              .residual = true,
              .act = GemmActivation::Relu,
              .split = true,
              .multiprocessors = 132},
             "split 1x1");
}

TEST(GpuConvGemmEmulated, SplitKStartsMidFilter) {
  // A 3x3 over few pixels: each part of the split reduction starts inside the filter's taps
  // (the staging's decode of its first column, then its steps in order).
  check_both({.images = 1,
              .h = 3,
              .w = 2,
              .c = 64,
              .filters = 16,
              .r = 3,
              .s = 3,
              .pad_top = 1,
              .pad_left = 1,
              .pad_bottom = 1,
              .pad_right = 1,
              .bias = true,
              .split = true,
              .multiprocessors = 132},
             "split 3x3");
}

TEST(GpuConvGemmEmulated, EveryBlockTile) {
  const Conv base{.images = 1,
                  .h = 12,
                  .w = 12,
                  .c = 8,
                  .filters = 136,
                  .r = 3,
                  .s = 3,
                  .pad_top = 1,
                  .pad_left = 1,
                  .pad_bottom = 1,
                  .pad_right = 1,
                  .bias = true};
  for (FloatType type : {FloatType::F16, FloatType::F32}) {
    std::string all = gemm_tile_names(type);
    for (size_t at = 0; at < all.size();) {
      const size_t end = std::min(all.find(' ', at), all.size());
      const std::string tile = all.substr(at, end - at);
      at = end + 1;
      Conv forced = base;
      forced.tile = tile.c_str();
      check(forced, type, std::string(type == FloatType::F16 ? "f16" : "f32") + " tile " + tile);
    }
  }
}

TEST(GpuConvGemmEmulated, LauncherRefusesInconsistentGeometry) {
  const Conv cv{.images = 1, .h = 4, .w = 4, .c = 8, .filters = 8, .r = 3, .s = 3};
  std::vector<float> x(1024), w(1024), y(1024);
  GemmArgs args = conv_args(cv, FloatType::F32);
  args.a = x.data(), args.b = w.data(), args.y = y.data();
  GemmArgs bad = args;
  bad.k += 1;  // not r s c
  EXPECT_EQ(launch_gemm(bad, nullptr), hipErrorInvalidValue);
  bad = args;
  bad.trans_b = false;  // the filters are [n][r s c]
  EXPECT_EQ(launch_gemm(bad, nullptr), hipErrorInvalidValue);
  bad = args;
  bad.m += 1;  // not whole images
  EXPECT_EQ(launch_gemm(bad, nullptr), hipErrorInvalidValue);
  bad = args;
  bad.batch = 2;
  EXPECT_EQ(launch_gemm(bad, nullptr), hipErrorInvalidValue);
}
