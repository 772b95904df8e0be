// gpu.lstm's kernels (kernels/lstm.hip) on the host emulation, products on the emulated GEMM,
// against an LSTM loop in double written from the ONNX equations: bidirectional with biases,
// peepholes, initial states and sequence lengths (one of them 0), in both layouts, float32 and
// float16, every output.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "backends/gpu/kernels/lstm.hpp"

using namespace kiln::backends::gpu;
using namespace kiln::backends::gpu::kernels;

namespace {

constexpr int64_t kSeq = 3, kBatch = 3, kIn = 4, kHidden = 3, kDirs = 2;
const std::vector<int32_t> kLens = {2, 0, 3};

double sigmoid(double v) {
  return 1 / (1 + std::exp(-v));
}

struct Outputs {
  std::vector<double> y, yh, yc;
};

// Operands in layout 0 (X [seq, batch, in], states [dirs, batch, hidden]); outputs likewise.
Outputs reference(const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& r, const std::vector<float>& b,
                  const std::vector<float>& h0, const std::vector<float>& c0,
                  const std::vector<float>& p) {
  const int64_t g = 4 * kHidden;
  Outputs o;
  o.y.assign(kSeq * kDirs * kBatch * kHidden, 0.0);
  o.yh.assign(kDirs * kBatch * kHidden, 0.0);
  o.yc = o.yh;
  for (int64_t d = 0; d < kDirs; ++d) {
    for (int64_t bi = 0; bi < kBatch; ++bi) {
      std::vector<double> h(kHidden), c(kHidden);
      for (int64_t j = 0; j < kHidden; ++j) {
        h[j] = h0[(d * kBatch + bi) * kHidden + j];
        c[j] = c0[(d * kBatch + bi) * kHidden + j];
      }
      const int64_t len = kLens[bi];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = d == 1 ? len - 1 - s : s;
        std::vector<double> pre(g);
        for (int64_t k = 0; k < g; ++k) {
          double v = b[d * 2 * g + k] + b[d * 2 * g + g + k];
          for (int64_t q = 0; q < kIn; ++q)
            v += double(x[(t * kBatch + bi) * kIn + q]) * w[(d * g + k) * kIn + q];
          for (int64_t q = 0; q < kHidden; ++q) v += h[q] * r[(d * g + k) * kHidden + q];
          pre[k] = v;
        }
        for (int64_t j = 0; j < kHidden; ++j) {
          const double pi = p[d * 3 * kHidden + j], po = p[d * 3 * kHidden + kHidden + j],
                       pf = p[d * 3 * kHidden + 2 * kHidden + j];
          const double ig = sigmoid(pre[j] + pi * c[j]);
          const double fg = sigmoid(pre[2 * kHidden + j] + pf * c[j]);
          const double cc = std::tanh(pre[3 * kHidden + j]);
          c[j] = fg * c[j] + ig * cc;
          const double og = sigmoid(pre[kHidden + j] + po * c[j]);
          h[j] = og * std::tanh(c[j]);
          o.y[((t * kDirs + d) * kBatch + bi) * kHidden + j] = h[j];
        }
      }
      for (int64_t j = 0; j < kHidden; ++j) {
        o.yh[(d * kBatch + bi) * kHidden + j] = h[j];
        o.yc[(d * kBatch + bi) * kHidden + j] = c[j];
      }
    }
  }
  return o;
}

// [a, b, rest] -> [b, a, rest].
template <typename T>
std::vector<T> swap01(const std::vector<T>& v, int64_t a, int64_t b, int64_t rest) {
  std::vector<T> out(v.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t k = 0; k < b; ++k)
      for (int64_t q = 0; q < rest; ++q) out[(k * a + i) * rest + q] = v[(i * b + k) * rest + q];
  return out;
}

float wide(float v) {
  return v;
}
float wide(__half v) {
  return __half2float(v);
}
template <typename T>
T narrow(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2half(v);
  }
}

template <typename T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = narrow<T>(v[i]);
  return out;
}

}  // namespace

TEST(GpuLstmEmulated, BidirectionalLengthsPeepholesBothLayouts) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = __half2float(__float2half(dist(rng)));  // exact in float16
    return v;
  };
  const int64_t g = 4 * kHidden;
  const std::vector<float> x = random(kSeq * kBatch * kIn), w = random(kDirs * g * kIn),
                           r = random(kDirs * g * kHidden), b = random(kDirs * 2 * g),
                           h0 = random(kDirs * kBatch * kHidden),
                           c0 = random(kDirs * kBatch * kHidden), p = random(kDirs * 3 * kHidden);
  const Outputs ref = reference(x, w, r, b, h0, c0, p);
  for (bool batch_major : {false, true}) {
    for (bool half : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << (batch_major ? "layout 1" : "layout 0") << (half ? ", f16" : ", f32"));
      // Layout 1 reorders X, the states and Y (the weights stay).
      const std::vector<float> xs = batch_major ? swap01(x, kSeq, kBatch, kIn) : x;
      const std::vector<float> h0s = batch_major ? swap01(h0, kDirs, kBatch, kHidden) : h0;
      const std::vector<float> c0s = batch_major ? swap01(c0, kDirs, kBatch, kHidden) : c0;
      LstmArgs a;
      a.type = half ? FloatType::F16 : FloatType::F32;
      a.seq = kSeq, a.batch = kBatch, a.input = kIn, a.hidden = kHidden, a.dirs = kDirs;
      a.batch_major = batch_major;
      a.lens = kLens.data();
      for (int d = 0; d < 2; ++d) {
        a.act[d][0].kind = RnnActivation::Sigmoid;
        a.act[d][1].kind = RnnActivation::Tanh;
        a.act[d][2].kind = RnnActivation::Tanh;
      }
      a.matrix_tiles = true;
      a.multiprocessors = 4;
      std::vector<float> y(ref.y.size(), 99.f), yh(ref.yh.size(), 99.f), yc(ref.yc.size(), 99.f);
      std::vector<char> scratch;
      auto run = [&]<typename T>() {
        const std::vector<T> tx = as<T>(xs), tw = as<T>(w), tr = as<T>(r), tb = as<T>(b),
                             th = as<T>(h0s), tc = as<T>(c0s), tp = as<T>(p);
        std::vector<T> ty(y.size(), narrow<T>(99.f)), tyh(yh.size(), narrow<T>(99.f)),
            tyc(yc.size(), narrow<T>(99.f));
        a.x = tx.data(), a.w = tw.data(), a.r = tr.data(), a.b = tb.data();
        a.h0 = th.data(), a.c0 = tc.data(), a.p = tp.data();
        a.y = ty.data(), a.y_h = tyh.data(), a.y_c = tyc.data();
        scratch.assign(lstm_scratch_bytes(a), 0);
        a.scratch = scratch.data();
        ASSERT_EQ(launch_lstm(a, nullptr), hipSuccess);
        for (size_t i = 0; i < y.size(); ++i) y[i] = wide(ty[i]);
        for (size_t i = 0; i < yh.size(); ++i) yh[i] = wide(tyh[i]), yc[i] = wide(tyc[i]);
      };
      if (half) {
        run.template operator()<__half>();
      } else {
        run.template operator()<float>();
      }
      if (batch_major) {
        // Y [batch, seq, dirs, hidden] -> [seq, dirs, batch, hidden]; states [batch, dirs, ..].
        std::vector<float> y0(y.size());
        for (int64_t bi = 0; bi < kBatch; ++bi)
          for (int64_t t = 0; t < kSeq; ++t)
            for (int64_t d = 0; d < kDirs; ++d)
              for (int64_t j = 0; j < kHidden; ++j)
                y0[((t * kDirs + d) * kBatch + bi) * kHidden + j] =
                    y[((bi * kSeq + t) * kDirs + d) * kHidden + j];
        y = y0;
        yh = swap01(yh, kBatch, kDirs, kHidden);
        yc = swap01(yc, kBatch, kDirs, kHidden);
      }
      const double tol = half ? 1e-2 : 1e-5;
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref.y[i], tol) << "Y at " << i;
      for (size_t i = 0; i < yh.size(); ++i) {
        ASSERT_NEAR(yh[i], ref.yh[i], tol) << "Y_h at " << i;
        ASSERT_NEAR(yc[i], ref.yc[i], tol) << "Y_c at " << i;
      }
    }
  }
}

// A run-time length outside [0, seq] (the reference refuses it; the kernel cannot raise from the
// device) reads as 0: that entry's Y stays zeros and its states are the initial ones, and no
// step reads past X.
TEST(GpuLstmEmulated, LengthOutsideTheSequenceReadsAsZero) {
  const int64_t seq = 2, batch = 2, in = 3, hidden = 2, g = 4 * hidden;
  std::vector<float> x(seq * batch * in, 0.5f), w(g * in, 0.25f), r(g * hidden, -0.25f);
  std::vector<float> h0 = {0.1f, 0.2f, 0.3f, 0.4f}, c0 = {0.5f, 0.6f, 0.7f, 0.8f};
  const std::vector<int32_t> lens = {7, -1};
  LstmArgs a;
  a.seq = seq, a.batch = batch, a.input = in, a.hidden = hidden;
  a.reverse = true;  // a length past seq would index past X here first
  a.lens = lens.data();
  a.act[0][0].kind = RnnActivation::Sigmoid;
  a.act[0][1].kind = RnnActivation::Tanh;
  a.act[0][2].kind = RnnActivation::Tanh;
  std::vector<float> y(seq * batch * hidden, 99.f), yh(batch * hidden), yc(batch * hidden);
  a.x = x.data(), a.w = w.data(), a.r = r.data(), a.h0 = h0.data(), a.c0 = c0.data();
  a.y = y.data(), a.y_h = yh.data(), a.y_c = yc.data();
  std::vector<char> scratch(lstm_scratch_bytes(a));
  a.scratch = scratch.data();
  ASSERT_EQ(launch_lstm(a, nullptr), hipSuccess);
  for (float v : y) EXPECT_EQ(v, 0.f);
  EXPECT_EQ(yh, h0);
  EXPECT_EQ(yc, c0);
}
