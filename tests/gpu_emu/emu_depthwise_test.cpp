// Kiln's own depthwise convolution (depthwise_conv.hip) on the host emulation against a plain
// loop in double with the reference's fused activation (ops::FusedActivation::apply): the tiled
// kernels (3x3 and 5x5, W stride 1 and 2, every channel vector, pixels and rows per thread) and
// the generic one (other filters, strides, dilations, odd channel counts, misaligned tensors),
// asymmetric pads, bias and residual, every activation, float32, float16 and bfloat16. The
// every-backend harness runs the same kernel through the executor on a real GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/gpu/kernels/depthwise_conv.hpp"
#include "core/half.hpp"
#include "ops/fused_activation.hpp"

using namespace kiln::backends::gpu::kernels;

namespace {

struct Conv {
  int n = 1, h = 9, w = 9, c = 8;
  int kh = 3, kw = 3, sh = 1, sw = 1, dh = 1, dw = 1;
  int pt = 1, pl = 1, pb = 1, pr = 1;
  bool bias = true, residual = false;
  GemmActivation act = GemmActivation::None;
  float alpha = 0.f, beta = 0.f;
  float input_max = __builtin_huge_valf();  // FusedConv's input_max (+inf: none)
  int vector_bytes = 0, pixels = 0, rows = 0;
  bool misaligned = false;  // tensors one element past an aligned address: scalar loads
  int oh() const { return (h + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
  int ow() const { return (w + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
};

// Element storage of one type: float32 as is, 16-bit types as their bits.
struct Buffer {
  FloatType type;
  std::vector<uint16_t> bits;
  std::vector<float> f32;
  size_t offset = 0;
  Buffer(FloatType t, size_t n, size_t off) : type(t), offset(off) {
    if (t == FloatType::F32) {
      f32.assign(n + off, 0.f);
    } else {
      bits.assign(n + off, 0);
    }
  }
  void* data() {
    return type == FloatType::F32 ? static_cast<void*>(f32.data() + offset)
                                  : static_cast<void*>(bits.data() + offset);
  }
  // Stores v rounded to the type; returns what was stored.
  float set(size_t i, float v) {
    switch (type) {
      case FloatType::F32:
        return f32[offset + i] = v;
      case FloatType::F16:
        bits[offset + i] = kiln::float_to_half_bits(v);
        break;
      case FloatType::BF16:
        bits[offset + i] = kiln::float_to_bfloat16_bits(v);
        break;
    }
    return get(i);
  }
  float get(size_t i) const {
    switch (type) {
      case FloatType::F32:
        return f32[offset + i];
      case FloatType::F16:
        return kiln::half_bits_to_float(bits[offset + i]);
      case FloatType::BF16:
        return kiln::bfloat16_bits_to_float(bits[offset + i]);
    }
    return 0.f;
  }
};

void check(const Conv& p, FloatType type, const std::string& what, bool expect_tiled) {
  SCOPED_TRACE(what);
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(what)));
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  const int oh = p.oh(), ow = p.ow();
  const size_t nx = size_t(p.n) * p.h * p.w * p.c, ny = size_t(p.n) * oh * ow * p.c;
  const size_t off = p.misaligned ? 1 : 0;
  Buffer x(type, nx, off), z(type, ny, off), y(type, ny, off);
  // Inputs as the kernel sees them (rounded to the type), weights as the runtime uploads them
  // (the type's values widened to float32).
  std::vector<float> xs(nx), zs(ny), ws(size_t(p.kh) * p.kw * p.c), bs(p.c);
  for (size_t i = 0; i < nx; ++i) xs[i] = x.set(i, d(rng));
  for (size_t i = 0; i < ny; ++i) zs[i] = z.set(i, d(rng));
  Buffer round(type, 1, 0);
  for (float& v : ws) v = round.set(0, d(rng));
  for (float& v : bs) v = round.set(0, d(rng));
  for (size_t i = 0; i < ny; ++i) y.set(i, 12345.f);  // every output must be written

  DepthwiseArgs a;
  a.type = type;
  a.x = x.data();
  a.w = ws.data();
  a.bias = p.bias ? bs.data() : nullptr;
  a.z = p.residual ? z.data() : nullptr;
  a.y = y.data();
  a.n = p.n, a.h = p.h, a.w_in = p.w, a.c = p.c, a.oh = oh, a.ow = ow;
  a.kh = p.kh, a.kw = p.kw, a.stride_h = p.sh, a.stride_w = p.sw;
  a.pad_top = p.pt, a.pad_left = p.pl, a.dil_h = p.dh, a.dil_w = p.dw;
  a.activation = p.act, a.act_alpha = p.alpha, a.act_beta = p.beta;
  a.input_max = p.input_max;
  a.multiprocessors = 1;
  a.vector_bytes = p.vector_bytes, a.pixels = p.pixels, a.rows = p.rows;
  EXPECT_EQ(depthwise_plan(a).tiled, expect_tiled);
  ASSERT_EQ(launch_depthwise_conv(a, nullptr), hipSuccess);

  kiln::ops::FusedActivation act;
  act.kind = static_cast<kiln::ops::Activation>(static_cast<int>(p.act));
  act.alpha = p.alpha, act.beta = p.beta;
  const double eps = type == FloatType::F32 ? 0 : type == FloatType::F16 ? 0x1p-10 : 0x1p-7;
  double worst = 0;
  size_t worst_at = 0;
  double worst_ref = 0;
  for (int n = 0; n < p.n; ++n)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j)
        for (int c = 0; c < p.c; ++c) {
          double sum = 0;
          for (int r = 0; r < p.kh; ++r)
            for (int s = 0; s < p.kw; ++s) {
              const int ih = i * p.sh - p.pt + r * p.dh, iw = j * p.sw - p.pl + s * p.dw;
              if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
              const double xv = xs[((size_t(n) * p.h + ih) * p.w + iw) * p.c + c];
              sum += std::min(xv, double(p.input_max)) * ws[(size_t(r) * p.kw + s) * p.c + c];
            }
          const size_t o = ((size_t(n) * oh + i) * ow + j) * p.c + c;
          if (p.bias) sum += bs[c];
          if (p.residual) sum += zs[o];
          const double ref = act.apply(sum);
          const double got = y.get(o);
          const double tol = eps > 0 ? eps * (std::abs(ref) + 1) : 1e-5 + 1e-4 * std::abs(ref);
          const double e = std::abs(got - ref) / tol;
          if (!(e <= worst)) {
            worst = e;
            worst_at = o;
            worst_ref = ref;
          }
        }
  EXPECT_LE(worst, 1.0) << "worst at " << worst_at << ": " << y.get(worst_at) << " vs "
                        << worst_ref;
}

const FloatType kTypes[] = {FloatType::F32, FloatType::F16, FloatType::BF16};
const char* type_name(FloatType t) {
  return t == FloatType::F32 ? "f32" : t == FloatType::F16 ? "f16" : "bf16";
}

TEST(GpuDepthwiseEmulated, TiledKernels) {
  for (FloatType t : kTypes) {
    for (int k : {3, 5}) {
      for (int stride : {1, 2}) {
        for (int vb : {8, 16}) {
          for (int pixels : {2, 4}) {
            Conv p;
            p.n = 2, p.h = 11, p.w = 13, p.c = 16;
            p.kh = p.kw = k, p.sh = p.sw = stride;
            p.pt = p.pl = p.pb = p.pr = k / 2;
            p.vector_bytes = vb, p.pixels = pixels, p.rows = pixels == 4 ? 2 : 4;
            check(p, t,
                  std::string(type_name(t)) + " " + std::to_string(k) + "x" + std::to_string(k) +
                      " s" + std::to_string(stride) + " vb" + std::to_string(vb) + " p" +
                      std::to_string(pixels),
                  true);
          }
        }
      }
    }
  }
}

TEST(GpuDepthwiseEmulated, TiledEdgesPadsAndRowStrides) {
  for (FloatType t : kTypes) {
    const std::string n = type_name(t);
    Conv p;  // asymmetric pads, H stride and dilation differ from W's, no bias
    p.n = 1, p.h = 10, p.w = 7, p.c = 24, p.sh = 3, p.dh = 2, p.pt = 2, p.pl = 0, p.pb = 1;
    p.pr = 2, p.bias = false;
    check(p, t, n + " asymmetric", true);
    Conv q;  // no pads, outputs narrower than a pixel group
    q.h = q.w = 5, q.pt = q.pl = q.pb = q.pr = 0, q.pixels = 4, q.c = 32;
    check(q, t, n + " valid", true);
    Conv r;  // default plan (vector of four, pixels and rows by the work)
    r.n = 2, r.h = r.w = 14, r.c = 40, r.sh = r.sw = 2;
    check(r, t, n + " default plan", true);
  }
}

// The producer's clip moved into the reader (input_max): tiled and generic kernels clip what
// they load, and pads stay 0. The inputs lie in (-2, 2): a bound of 0.5 clips a third of them.
TEST(GpuDepthwiseEmulated, InputMaxClipsWhatIsLoaded) {
  for (FloatType t : kTypes) {
    const std::string n = type_name(t);
    Conv tiled;
    tiled.n = 2, tiled.h = 11, tiled.w = 13, tiled.c = 16, tiled.input_max = 0.5f;
    tiled.act = GemmActivation::Clip, tiled.alpha = 0.f, tiled.beta = 6.f;
    check(tiled, t, n + " tiled input_max", true);
    Conv generic = tiled;
    generic.sh = generic.sw = 3;  // W stride 3: the generic kernel
    check(generic, t, n + " generic input_max", false);
  }
}

TEST(GpuDepthwiseEmulated, GenericKernel) {
  for (FloatType t : kTypes) {
    const std::string n = type_name(t);
    Conv odd;  // 33 channels: no whole vector
    odd.n = 2, odd.c = 33;
    check(odd, t, n + " 33 channels", false);
    Conv three;
    three.c = 3, three.h = three.w = 6;
    check(three, t, n + " 3 channels", false);
    Conv dil;  // W dilation 2
    dil.dh = dil.dw = 2, dil.pt = dil.pl = dil.pb = dil.pr = 2, dil.c = 16;
    check(dil, t, n + " dilation 2", false);
    Conv k7;
    k7.kh = k7.kw = 7, k7.pt = k7.pl = k7.pb = k7.pr = 3, k7.c = 8, k7.h = k7.w = 10;
    check(k7, t, n + " 7x7", false);
    Conv rect;  // 3x1 filter, stride 3
    rect.kh = 3, rect.kw = 1, rect.pl = rect.pr = 0, rect.sh = rect.sw = 3, rect.c = 12;
    check(rect, t, n + " 3x1 s3", false);
    Conv mis;  // misaligned tensors: one channel per thread
    mis.c = 16, mis.misaligned = true, mis.residual = true;
    check(mis, t, n + " misaligned", false);
  }
}

TEST(GpuDepthwiseEmulated, EpilogueActivationsAndResidual) {
  struct Act {
    GemmActivation a;
    float alpha, beta;
    const char* name;
  };
  const Act acts[] = {{GemmActivation::None, 0, 0, "none"},
                      {GemmActivation::Relu, 0, 0, "relu"},
                      {GemmActivation::Clip, 0, 6, "relu6"},
                      {GemmActivation::Clip, -0.5f, 0.75f, "clip"},
                      {GemmActivation::Sigmoid, 0, 0, "sigmoid"},
                      {GemmActivation::Silu, 0, 0, "silu"},
                      {GemmActivation::HardSwish, 0, 0, "hard_swish"},
                      {GemmActivation::HardSigmoid, 0.2f, 0.5f, "hard_sigmoid"},
                      {GemmActivation::LeakyRelu, 0.1f, 0, "leaky_relu"},
                      {GemmActivation::Tanh, 0, 0, "tanh"},
                      {GemmActivation::Gelu, 0, 0, "gelu"},
                      {GemmActivation::GeluTanh, 0, 0, "gelu_tanh"}};
  for (FloatType t : kTypes) {
    for (const Act& act : acts) {
      for (bool residual : {false, true}) {
        Conv p;
        p.n = 2, p.h = p.w = 6, p.c = 8, p.residual = residual;
        p.act = act.a, p.alpha = act.alpha, p.beta = act.beta;
        check(p, t, std::string(type_name(t)) + " " + act.name + (residual ? " residual" : ""),
              true);
      }
    }
  }
}

}  // namespace
