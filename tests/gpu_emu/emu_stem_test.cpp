// Kiln's own convolution of few input channels (stem_conv.hip) on the host emulation against a
// plain loop in double with the reference's fused activation: row-major and channels-last
// inputs, strides, dilations, asymmetric pads, with and without bias, the clip family and a
// general activation, float32, float16 and bfloat16. The every-backend harness runs the same
// kernel through the executor on a real GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/gpu/kernels/stem_conv.hpp"
#include "core/half.hpp"
#include "ops/fused_activation.hpp"

using namespace kiln::backends::gpu::kernels;

namespace {

struct Stem {
  int n = 2, h = 11, w = 10, c = 3, f = 16;
  int kh = 3, kw = 3, sh = 2, sw = 2, dh = 1, dw = 1, pt = 1, pl = 1, pb = 1, pr = 1;
  bool bias = true, channels_last_input = false;
  GemmActivation act = GemmActivation::None;
  float alpha = 0.f, beta = 0.f;
  int oh() const { return (h + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
  int ow() const { return (w + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
};

// A value rounded to `type` (what the kernel reads from a tensor of it).
float rounded(FloatType type, float v) {
  switch (type) {
    case FloatType::F16:
      return kiln::half_bits_to_float(kiln::float_to_half_bits(v));
    case FloatType::BF16:
      return kiln::bfloat16_bits_to_float(kiln::float_to_bfloat16_bits(v));
    default:
      return v;
  }
}

void check(const Stem& p, FloatType type, const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(what)));
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  const int oh = p.oh(), ow = p.ow();
  const size_t nx = size_t(p.n) * p.c * p.h * p.w, ny = size_t(p.n) * oh * ow * p.f;
  // x as logical [n, c, h, w] values; stored in the chosen layout.
  std::vector<float> xs(nx), ws(size_t(p.kh) * p.kw * p.c * p.f), bs(p.f);
  for (float& v : xs) v = rounded(type, d(rng));
  for (float& v : ws) v = rounded(type, d(rng));
  for (float& v : bs) v = rounded(type, d(rng));
  const int64_t sn = int64_t(p.c) * p.h * p.w;
  const int64_t sc = p.channels_last_input ? 1 : int64_t(p.h) * p.w;
  const int64_t sh = p.channels_last_input ? int64_t(p.w) * p.c : p.w;
  const int64_t sw = p.channels_last_input ? p.c : 1;
  std::vector<float> xf(nx), yf(ny, 12345.f);
  std::vector<uint16_t> xb(nx), yb(ny, 0x7bff);
  for (int n = 0; n < p.n; ++n)
    for (int c = 0; c < p.c; ++c)
      for (int i = 0; i < p.h; ++i)
        for (int j = 0; j < p.w; ++j) {
          const float v = xs[((size_t(n) * p.c + c) * p.h + i) * p.w + j];
          const size_t at = n * sn + c * sc + i * sh + j * sw;
          xf[at] = v;
          xb[at] = type == FloatType::F16 ? kiln::float_to_half_bits(v)
                                          : kiln::float_to_bfloat16_bits(v);
        }
  StemConvArgs a;
  a.type = type;
  a.x = type == FloatType::F32 ? static_cast<const void*>(xf.data()) : xb.data();
  a.y = type == FloatType::F32 ? static_cast<void*>(yf.data()) : yb.data();
  a.w = ws.data();
  a.bias = p.bias ? bs.data() : nullptr;
  a.x_stride_n = sn, a.x_stride_c = sc, a.x_stride_h = sh, a.x_stride_w = sw;
  a.n = p.n, a.h = p.h, a.w_in = p.w, a.c = p.c, a.f = p.f, a.oh = oh, a.ow = ow;
  a.kh = p.kh, a.kw = p.kw, a.stride_h = p.sh, a.stride_w = p.sw, a.dil_h = p.dh, a.dil_w = p.dw;
  a.pad_top = p.pt, a.pad_left = p.pl;
  a.activation = p.act, a.act_alpha = p.alpha, a.act_beta = p.beta;
  ASSERT_EQ(launch_stem_conv(a, nullptr), hipSuccess);

  kiln::ops::FusedActivation act;
  act.kind = static_cast<kiln::ops::Activation>(static_cast<int>(p.act));
  act.alpha = p.alpha, act.beta = p.beta;
  const double eps = type == FloatType::F32 ? 0 : type == FloatType::F16 ? 0x1p-10 : 0x1p-7;
  double worst = 0;
  for (int n = 0; n < p.n; ++n)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j)
        for (int o = 0; o < p.f; ++o) {
          double sum = p.bias ? bs[o] : 0.0;
          for (int r = 0; r < p.kh; ++r)
            for (int s = 0; s < p.kw; ++s)
              for (int c = 0; c < p.c; ++c) {
                const int ih = i * p.sh - p.pt + r * p.dh, iw = j * p.sw - p.pl + s * p.dw;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                sum += double(xs[((size_t(n) * p.c + c) * p.h + ih) * p.w + iw]) *
                       ws[((size_t(r) * p.kw + s) * p.c + c) * p.f + o];
              }
          const double ref = act.apply(sum);
          const size_t at = ((size_t(n) * oh + i) * ow + j) * p.f + o;
          const double got = type == FloatType::F32   ? yf[at]
                             : type == FloatType::F16 ? kiln::half_bits_to_float(yb[at])
                                                      : kiln::bfloat16_bits_to_float(yb[at]);
          const double tol = eps > 0 ? eps * (std::abs(ref) + 1) : 1e-5 + 1e-4 * std::abs(ref);
          worst = std::max(worst, std::abs(got - ref) / tol);
        }
  EXPECT_LE(worst, 1.0);
}

const FloatType kTypes[] = {FloatType::F32, FloatType::F16, FloatType::BF16};
const char* type_name(FloatType t) {
  return t == FloatType::F32 ? "f32" : t == FloatType::F16 ? "f16" : "bf16";
}

TEST(GpuStemConvEmulated, MobileNetStemBothLayouts) {
  for (FloatType t : kTypes) {
    for (bool last : {false, true}) {
      Stem p;  // 3x3 s2 pad 1, 3 -> 16, ReLU6
      p.channels_last_input = last;
      p.act = GemmActivation::Clip, p.alpha = 0.f, p.beta = 6.f;
      check(p, t, std::string(type_name(t)) + (last ? " channels-last" : " row-major"));
    }
  }
}

TEST(GpuStemConvEmulated, GeometryBiasAndActivations) {
  for (FloatType t : kTypes) {
    const std::string n = type_name(t);
    Stem dilated;  // one channel, 5x5 dilated, asymmetric pads, no bias, 8 filters
    dilated.c = 1, dilated.f = 8, dilated.kh = dilated.kw = 5, dilated.sh = 1, dilated.sw = 2;
    dilated.dh = 2, dilated.pt = 3, dilated.pl = 0, dilated.pb = 2, dilated.pr = 4;
    dilated.bias = false;
    check(dilated, t, n + " dilated");
    Stem general;  // 4 channels, 32 filters, a general activation (out of line)
    general.c = 4, general.f = 32, general.sh = general.sw = 1,
    general.act = GemmActivation::HardSwish;
    check(general, t, n + " hardswish");
  }
}

TEST(GpuStemConvEmulated, RefusesWhatItCannotRun) {
  StemConvArgs a;
  a.n = a.h = a.w_in = a.oh = a.ow = 1, a.c = 3, a.kh = a.kw = 3;
  a.f = 12;  // not a multiple of kStemChannelGroup
  EXPECT_EQ(launch_stem_conv(a, nullptr), hipErrorInvalidValue);
  a.f = 16, a.kh = a.kw = 7;  // 147 taps
  EXPECT_EQ(launch_stem_conv(a, nullptr), hipErrorInvalidValue);
}

}  // namespace
