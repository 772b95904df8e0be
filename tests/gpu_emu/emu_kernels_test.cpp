// The GPU kernels' launchers run on the host emulation (backends/gpu/vendor.hpp here), built
// once for 32-lane and once for 64-lane wavefronts, against plain loops in double: the index
// math, the reductions, the online softmax and the barriers and shuffles (which deadlock if
// not every thread reaches them) are checked without a GPU. The every-backend harness checks
// the same kernels through the executor on a real device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>
#include "backends/gpu/kernels/attention.hpp"
#include "backends/gpu/kernels/cast.hpp"
#include "backends/gpu/kernels/data_movement.hpp"
#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/kernels/layer_norm.hpp"
#include "backends/gpu/kernels/reduce.hpp"
#include "backends/gpu/kernels/softmax.hpp"
#include "backends/gpu/runtime/attention_layout.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "core/shape.hpp"
#include "ops/point_ops.hpp"
using namespace kiln::backends::gpu;
using namespace kiln::backends::gpu::kernels;

namespace {

std::mt19937 rng(1);
std::vector<float> rnd(size_t n, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
// |got - ref| <= atol + rtol |ref| everywhere (float32 kernels against double loops).
void expect(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
            double rtol = 1e-4, double atol = 1e-5) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(got[i] - ref[i]) / (atol + rtol * std::abs(ref[i]));
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst at " << at << ": " << got[at] << " vs " << ref[at];
}
std::vector<float> halves_to_f(const std::vector<__half>& h) {
  std::vector<float> f;
  for (auto x : h) f.push_back(__half2float(x));
  return f;
}
std::vector<__half> f_to_halves(const std::vector<float>& f) {
  std::vector<__half> h;
  for (auto x : f) h.push_back(__float2half(x));
  return h;
}

// Row-major index walk helper.
std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& d) {
  std::vector<int64_t> r(d.size());
  for (size_t k = d.size(); k-- > 0;) {
    r[k] = i % d[k];
    i /= d[k];
  }
  return r;
}
int64_t ravel_bcast(const std::vector<int64_t>& idx, const std::vector<int64_t>& d) {
  int64_t off = 0;
  size_t lead = idx.size() - d.size();
  for (size_t k = 0; k < d.size(); ++k) off = off * d[k] + (d[k] == 1 ? 0 : idx[lead + k]);
  return off;
}

TEST(GpuKernelsEmulated, Binary) {
  std::vector<int64_t> da = {2, 1, 3, 1, 2, 3}, db = {1, 2, 1, 4, 1, 3}, out;
  broadcast_dims({da, db}, out);
  auto a = rnd(kiln::shape_numel(da)), b = rnd(kiln::shape_numel(db));
  int64_t n = kiln::shape_numel(out);
  std::vector<float> y(n);
  StridedShape s =
      make_strided_shape(out, {broadcast_strides(da, out), broadcast_strides(db, out)}, "t");
  launch_binary(BinaryOp::Sub, FloatType::F32, a.data(), b.data(), y.data(), n, &s, nullptr);
  std::vector<double> r(n);
  for (int64_t i = 0; i < n; ++i) {
    auto idx = unravel(i, out);
    r[i] = double(a[ravel_bcast(idx, da)]) - b[ravel_bcast(idx, db)];
  }
  expect("binary rank6 broadcast sub", y, r);
  // channel broadcast, f16, pow
  std::vector<int64_t> dc = {2, 3, 5, 5}, dd = {1, 3, 1, 1};
  broadcast_dims({dc, dd}, out);
  auto c = rnd(150, 0.1f, 2), d = rnd(3, 0.1f, 2);
  auto ch = f_to_halves(c), dh = f_to_halves(d);
  std::vector<__half> yh(150);
  s = make_strided_shape(out, {broadcast_strides(dc, out), broadcast_strides(dd, out)}, "t");
  launch_binary(BinaryOp::Pow, FloatType::F16, ch.data(), dh.data(), yh.data(), 150, &s, nullptr);
  std::vector<double> r2(150);
  for (int64_t i = 0; i < 150; ++i) {
    auto idx = unravel(i, out);
    r2[i] = __half2float(__float2half(std::pow(__half2float(ch[i]), __half2float(dh[idx[1]]))));
  }
  expect("binary channel pow f16", halves_to_f(yh), r2, 1e-3, 1e-3);
  // same shape max, scalar left
  std::vector<float> e = rnd(1), f = rnd(105), z(105);
  std::vector<int64_t> ds = {}, df = {3, 5, 7};
  broadcast_dims({ds, df}, out);
  s = make_strided_shape(out, {broadcast_strides(ds, out), broadcast_strides(df, out)}, "t");
  launch_binary(BinaryOp::Max, FloatType::F32, e.data(), f.data(), z.data(), 105, &s, nullptr);
  std::vector<double> r3(105);
  for (int i = 0; i < 105; ++i) r3[i] = std::max(e[0], f[i]);
  expect("binary scalar-left max", z, r3);
}

TEST(GpuKernelsEmulated, Unary) {
  auto x = rnd(1000);
  std::vector<float> y(1000);
  launch_unary({UnaryOp::GeluTanh}, FloatType::F32, x.data(), y.data(), 1000, nullptr);
  std::vector<double> r(1000);
  for (int i = 0; i < 1000; ++i) r[i] = kiln::point::gelu_tanh<double>(x[i]);
  expect("unary gelu_tanh", y, r);
  launch_unary({UnaryOp::Selu, 1.6732632f, 1.050701f}, FloatType::F32, x.data(), y.data(), 1000,
               nullptr);
  for (int i = 0; i < 1000; ++i) r[i] = kiln::point::selu<double>(x[i], 1.6732632f, 1.050701f);
  expect("unary selu", y, r);
  // bf16 via Bf16 bits: clip
  std::vector<uint16_t> xb(1000), yb(1000);
  for (int i = 0; i < 1000; ++i) xb[i] = kiln::float_to_bfloat16_bits(x[i]);
  launch_unary({UnaryOp::Clip, -0.5f, 0.75f}, FloatType::BF16, xb.data(), yb.data(), 1000, nullptr);
  std::vector<float> got(1000);
  for (int i = 0; i < 1000; ++i) {
    got[i] = kiln::bfloat16_bits_to_float(yb[i]);
    r[i] = std::clamp(double(kiln::bfloat16_bits_to_float(xb[i])), -0.5, 0.75);
  }
  expect("unary clip bf16", got, r, 1e-2, 1e-2);
}

// Same-shape unary and binary kernels over 16-byte vectors plus a tail (n % 8 != 0 in float16),
// and from an unaligned start (one element a step): the same results either way.
TEST(GpuKernelsEmulated, ElementwiseVectorsAndTails) {
  const int64_t n = 1003;
  std::vector<__half> a = f_to_halves(rnd(n + 1)), b = f_to_halves(rnd(n + 1));
  std::vector<float> af = halves_to_f(a), bf = halves_to_f(b);
  for (int64_t shift : {0, 1}) {
    std::vector<__half> y(n + 1);
    launch_unary({UnaryOp::GeluErf}, FloatType::F16, a.data() + shift, y.data() + shift, n,
                 nullptr);
    std::vector<float> yf = halves_to_f(y);
    std::vector<double> r(n);
    for (int64_t i = 0; i < n; ++i) r[i] = kiln::point::gelu_erf<double>(af[shift + i]);
    expect(shift ? "unary gelu unaligned" : "unary gelu vectors",
           std::vector<float>(yf.begin() + shift, yf.begin() + shift + n), r, 2e-3, 2e-3);
    launch_binary(BinaryOp::Mul, FloatType::F16, a.data() + shift, b.data() + shift,
                  y.data() + shift, n, nullptr, nullptr);
    yf = halves_to_f(y);
    for (int64_t i = 0; i < n; ++i) r[i] = double(af[shift + i]) * bf[shift + i];
    expect(shift ? "binary mul unaligned" : "binary mul vectors",
           std::vector<float>(yf.begin() + shift, yf.begin() + shift + n), r, 2e-3, 2e-3);
  }
}

void softmax_ref(const std::vector<float>& x, std::vector<double>& y, int64_t outer, int64_t n,
                 int64_t inner, bool log) {
  y.assign(x.size(), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double top = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) top = std::max(top, double(x[(o * n + j) * inner + i]));
      for (int64_t j = 0; j < n; ++j) sum += std::exp(x[(o * n + j) * inner + i] - top);
      for (int64_t j = 0; j < n; ++j) {
        double v = x[(o * n + j) * inner + i] - top;
        y[(o * n + j) * inner + i] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
}
TEST(GpuKernelsEmulated, Softmax) {
  struct C {
    int64_t o, n, i;
    bool log;
    const char* name;
  };
  for (C c : {C{3, 37, 1, false, "softmax rows"}, C{3, 2001, 1, false, "softmax long rows"},
              C{3, 7, 5, true, "log_softmax columns"},
              C{13, 5, 1, true, "log_softmax many short rows"}}) {
    auto x = rnd(c.o * c.n * c.i);
    std::vector<float> y(x.size());
    std::vector<double> r;
    launch_softmax(FloatType::F32, x.data(), y.data(), c.o, c.n, c.i, c.log, nullptr);
    softmax_ref(x, r, c.o, c.n, c.i, c.log);
    expect(c.name, y, r);
    // in place
    std::vector<float> z = x;
    launch_softmax(FloatType::F32, z.data(), z.data(), c.o, c.n, c.i, c.log, nullptr);
    expect("  in place", z, r);
  }
}

TEST(GpuKernelsEmulated, LayerNorm) {
  // A wavefront's staged row, a block's 4 and 16 staged elements a thread, and an unstaged row.
  for (int64_t cols : {40, 768, 1501, 5000}) {
    const int64_t rows = 5;
    auto x = rnd(rows * cols), skip = rnd(rows * cols), bias = rnd(cols), g = rnd(cols),
         b = rnd(cols);
    std::vector<float> y(x.size()), mean(rows), inv(rows), sum(x.size());
    LayerNormArgs a;
    a.x = x.data();
    a.skip = skip.data();
    a.bias = bias.data();
    a.gamma = g.data();
    a.beta = b.data();
    a.y = y.data();
    a.mean = mean.data();
    a.inv_std = inv.data();
    a.sum = sum.data();
    a.rows = rows;
    a.cols = cols;
    a.skip_n = rows * cols;
    a.bias_n = cols;
    a.gamma_n = cols;
    a.beta_n = cols;
    a.epsilon = 1e-5f;
    launch_layer_norm(FloatType::F32, a, nullptr);
    std::vector<double> ry(x.size()), rm(rows), ri(rows), rs(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t j = 0; j < cols; ++j) {
        float z = float(float(x[r * cols + j] + skip[r * cols + j]) + bias[j]);
        rs[r * cols + j] = z;
        s += z;
      }
      double m = s / cols, v = 0;
      for (int64_t j = 0; j < cols; ++j) v += (rs[r * cols + j] - m) * (rs[r * cols + j] - m);
      double iv = 1 / std::sqrt(v / cols + 1e-5);
      rm[r] = m;
      ri[r] = iv;
      for (int64_t j = 0; j < cols; ++j)
        ry[r * cols + j] = (rs[r * cols + j] - m) * iv * g[j] + b[j];
    }
    expect(cols > 1024 ? "skip layer norm long y" : "skip layer norm y", y, ry);
    expect("  mean", mean, rm);
    expect("  inv_std", inv, ri);
    expect("  sum", sum, rs);
  }
}

// The 16-byte vector kernel in float16 (BERT's 768 columns, 3 chunks a lane on wave32), with the
// skip full-size or one row broadcast over the rows, and an unaligned x that takes the block
// kernel instead: the same results either way.
TEST(GpuKernelsEmulated, LayerNormVectorFloat16) {
  // 40 rows: with 4 rows a wavefront the grid holds fewer wavefronts than rows.
  const int64_t rows = 40, cols = 768;
  for (int per_wave : {1, 4}) {
    for (bool skip_row : {false, true}) {
      for (int64_t shift : {0, 1}) {
        std::vector<__half> x = f_to_halves(rnd(rows * cols + 1)),
                            skip = f_to_halves(rnd(skip_row ? cols : rows * cols)),
                            bias = f_to_halves(rnd(cols)), g = f_to_halves(rnd(cols)),
                            b = f_to_halves(rnd(cols)), y(rows * cols + 1);
        LayerNormArgs a;
        a.x = x.data() + shift;
        a.skip = skip.data();
        a.bias = bias.data();
        a.gamma = g.data();
        a.beta = b.data();
        a.y = y.data() + shift;
        a.rows = rows;
        a.cols = cols;
        a.skip_n = static_cast<int64_t>(skip.size());
        a.bias_n = a.gamma_n = a.beta_n = cols;
        a.rows_per_wave = per_wave;
        launch_layer_norm(FloatType::F16, a, nullptr);
        std::vector<float> xf = halves_to_f(x), sf = halves_to_f(skip), bf = halves_to_f(bias),
                           gf = halves_to_f(g), bef = halves_to_f(b), yf = halves_to_f(y);
        auto h = [](double v) {
          return double(kiln::half_bits_to_float(kiln::float_to_half_bits(float(v))));
        };
        std::vector<double> ry(rows * cols);
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<double> z(cols);
          double s = 0;
          for (int64_t j = 0; j < cols; ++j) {
            z[j] = h(h(xf[shift + r * cols + j] + sf[(skip_row ? 0 : r * cols) + j]) + bf[j]);
            s += z[j];
          }
          double m = s / cols, v = 0;
          for (double e : z) v += (e - m) * (e - m);
          const double iv = 1 / std::sqrt(v / cols + 1e-5);
          for (int64_t j = 0; j < cols; ++j) ry[r * cols + j] = (z[j] - m) * iv * gf[j] + bef[j];
        }
        expect(skip_row ? "vector layer norm, skip row" : "vector layer norm",
               std::vector<float>(yf.begin() + shift, yf.begin() + shift + rows * cols), ry, 4e-3,
               4e-3);
      }
    }
  }
}

TEST(GpuKernelsEmulated, Reduce) {
  std::vector<int64_t> d = {4, 3, 5, 2};
  auto x = rnd(120);
  auto st = row_major_strides(d);
  StridedShape kept = make_strided_shape({3, 2}, {{st[1], st[3]}}, "t");
  StridedShape red = make_strided_shape({4, 5}, {{st[0], st[2]}}, "t");
  std::vector<float> y(6);
  launch_reduce(ReduceOp::Mean, FloatType::F32, x.data(), y.data(), 6, kept, 20, red, nullptr);
  std::vector<double> r(6, 0);
  for (int64_t i = 0; i < 120; ++i) {
    auto idx = unravel(i, d);
    r[idx[1] * 2 + idx[3]] += x[i] / 20.0;
  }
  expect("reduce mean outer axes", y, r);
  auto x2 = rnd(2 * 3001);
  StridedShape k2 = make_strided_shape({2}, {{3001}}, "t"),
               r2s = make_strided_shape({3001}, {{1}}, "t");
  std::vector<float> y2(2);
  launch_reduce(ReduceOp::Max, FloatType::F32, x2.data(), y2.data(), 2, k2, 3001, r2s, nullptr);
  std::vector<double> r2 = {*std::max_element(x2.begin(), x2.begin() + 3001),
                            *std::max_element(x2.begin() + 3001, x2.end())};
  expect("reduce max long", y2, r2);
  launch_reduce(ReduceOp::Sum, FloatType::F32, x2.data(), y2.data(), 2, k2, 3001, r2s, nullptr);
  r2 = {0, 0};
  for (int i = 0; i < 6002; ++i) r2[i / 3001] += x2[i];
  expect("reduce sum long", y2, r2, 1e-4, 1e-4);
}

// Swaps axes -3 and -2 of a row-major tensor (bsnh's [.., S, N, H] <-> [.., N, S, H]).
template <typename T>
std::vector<T> swap_seq_heads(const std::vector<T>& x, std::vector<int64_t>& dims) {
  const size_t r = dims.size();
  const int64_t outer = kiln::shape_numel(std::vector<int64_t>(dims.begin(), dims.end() - 3));
  const int64_t a = dims[r - 3], b = dims[r - 2], h = dims[r - 1];
  std::vector<T> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j)
        for (int64_t e = 0; e < h; ++e)
          y[((o * b + j) * a + i) * h + e] = x[((o * a + i) * b + j) * h + e];
  std::swap(dims[r - 3], dims[r - 2]);
  return y;
}

// Attention over [.., N, S, H] operands against a double reference; `bsnh` hands the kernel the
// same operands as [.., S, N, H] (read in place) and compares its output swapped back.
void check_attention(std::vector<int64_t> qd, std::vector<int64_t> kd, std::vector<int64_t> vd,
                     std::vector<int64_t> md, const char* name, bool half = false,
                     bool tiles = false, bool bsnh = false, int waves = 0) {
  auto bat = [](const std::vector<int64_t>& d) {
    return std::vector<int64_t>(d.begin(), d.end() - 2);
  };
  const bool masked = !md.empty();
  AttentionArgs a;
  std::vector<int64_t> batch;
  {
    std::vector<std::vector<int64_t>> batches = {bat(qd), bat(kd), bat(vd)};
    if (masked) batches.push_back(bat(md));
    broadcast_dims(batches, batch);
  }
  std::vector<int64_t> qs = qd, ks = kd, vs = vd;  // the kernel's operand dims
  if (bsnh) {
    for (auto* d : {&qs, &ks, &vs}) std::swap((*d)[d->size() - 3], (*d)[d->size() - 2]);
  }
  plan_attention(qs, ks, vs, masked ? &md : nullptr, bsnh, a, "t");
  a.scale = 1.f / std::sqrt(float(a.d));
  a.matrix_tiles = tiles;
  a.waves = waves;
  auto q = rnd(kiln::shape_numel(qd)), k = rnd(kiln::shape_numel(kd)),
       v = rnd(kiln::shape_numel(vd)), m = rnd(masked ? kiln::shape_numel(md) : 0);
  std::vector<float> out(a.batches * a.sq * a.dv);
  std::vector<__half> qh = f_to_halves(q), kh = f_to_halves(k), vh = f_to_halves(v),
                      mh = f_to_halves(m), oh(out.size());
  if (half) {
    q = halves_to_f(qh);
    k = halves_to_f(kh);
    v = halves_to_f(vh);
    m = halves_to_f(mh);
  }
  // The kernel's copies of the operands (bsnh: swapped).
  auto laid = [&](const auto& x, std::vector<int64_t> d) {
    return bsnh ? swap_seq_heads(x, d) : x;
  };
  std::vector<float> qk = laid(q, qd), kk = laid(k, kd), vk = laid(v, vd);
  std::vector<__half> qhk = laid(qh, qd), khk = laid(kh, kd), vhk = laid(vh, vd);
  if (half) {
    a.q = qhk.data();
    a.k = khk.data();
    a.v = vhk.data();
    a.mask = masked ? mh.data() : nullptr;
    a.out = oh.data();
  } else {
    a.q = qk.data();
    a.k = kk.data();
    a.v = vk.data();
    a.mask = masked ? m.data() : nullptr;
    a.out = out.data();
  }
  // The matrix-tile cases must reach that kernel (16-byte aligned vectors, head size listed).
  ASSERT_TRUE(!tiles || attention_tiles_fit(a)) << name;
  launch_attention(half ? FloatType::F16 : FloatType::F32, a, nullptr);
  if (half) out = halves_to_f(oh);
  if (bsnh) {
    // The output came as [.., S, N, Dv]: back to [.., N, S, Dv].
    std::vector<int64_t> od = batch;
    od.push_back(a.sq);
    od.push_back(a.dv);
    std::swap(od[od.size() - 3], od[od.size() - 2]);
    out = swap_seq_heads(out, od);
  }
  std::vector<double> r(out.size());
  for (int64_t b = 0; b < a.batches; ++b) {
    auto idx = unravel(b, batch);
    int64_t oq = ravel_bcast(idx, bat(qd)), ok = ravel_bcast(idx, bat(kd)),
            ov = ravel_bcast(idx, bat(vd)), om = masked ? ravel_bcast(idx, bat(md)) : 0;
    for (int64_t i = 0; i < a.sq; ++i) {
      std::vector<double> p(a.sk);
      double top = -INFINITY;
      for (int64_t j = 0; j < a.sk; ++j) {
        double s = 0;
        for (int64_t e = 0; e < a.d; ++e)
          s += double(q[(oq * a.sq + i) * a.d + e]) * k[(ok * a.sk + j) * a.d + e];
        s *= a.scale;
        if (masked)
          s += m[om * a.msq * a.msk + (a.msq == 1 ? 0 : i) * a.msk + (a.msk == 1 ? 0 : j)];
        p[j] = s;
        top = std::max(top, s);
      }
      double tot = 0;
      for (auto& s : p) tot += (s = std::exp(s - top));
      for (int64_t e = 0; e < a.dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < a.sk; ++j) acc += p[j] * v[(ov * a.sk + j) * a.dv + e];
        r[(b * a.sq + i) * a.dv + e] = acc / tot;
      }
    }
  }
  if (half)
    expect(name, out, r, 2e-3, 2e-3);
  else
    expect(name, out, r);
}

// Keys masked everywhere (-inf) in the second batch: NaN rows there, or 0 with zero_nan_probs;
// the first batch's rows are the same either way. The FMA kernel in float32 and the matrix-tile
// one in float16.
TEST(GpuKernelsEmulated, AttentionZeroNanProbabilities) {
  for (bool tiles : {false, true}) {
    const int64_t sq = 3, sk = 5, d = tiles ? 32 : 8;
    std::vector<float> q = rnd(2 * sq * d), k = rnd(2 * sk * d), v = rnd(2 * sk * d);
    std::vector<float> m(2 * sk, 0.f);
    for (int64_t j = sk; j < 2 * sk; ++j) m[j] = -INFINITY;
    std::vector<__half> qh = f_to_halves(q), kh = f_to_halves(k), vh = f_to_halves(v),
                        mh = f_to_halves(m);
    std::vector<float> plain(2 * sq * d), zeroed(2 * sq * d);
    for (bool zero : {false, true}) {
      AttentionArgs a;
      const std::vector<int64_t> mask_dims = {2, 1, sk};
      plan_attention({2, sq, d}, {2, sk, d}, {2, sk, d}, &mask_dims, false, a, "t");
      a.scale = 0.5f;
      a.zero_nan_probs = zero;
      std::vector<float>& y = zero ? zeroed : plain;
      if (tiles) {
        std::vector<__half> yh(y.size());
        a.matrix_tiles = true;
        a.q = qh.data();
        a.k = kh.data();
        a.v = vh.data();
        a.mask = mh.data();
        a.out = yh.data();
        ASSERT_TRUE(attention_tiles_fit(a));
        launch_attention(FloatType::F16, a, nullptr);
        y = halves_to_f(yh);
      } else {
        a.q = q.data();
        a.k = k.data();
        a.v = v.data();
        a.mask = m.data();
        a.out = y.data();
        launch_attention(FloatType::F32, a, nullptr);
      }
    }
    for (int64_t i = 0; i < sq * d; ++i) {
      EXPECT_TRUE(std::isfinite(plain[i])) << tiles << " " << i;
      EXPECT_EQ(zeroed[i], plain[i]) << tiles << " " << i;
      EXPECT_TRUE(std::isnan(plain[sq * d + i])) << tiles << " " << i;
      EXPECT_EQ(zeroed[sq * d + i], 0.f) << tiles << " " << i;
    }
  }
}

TEST(GpuKernelsEmulated, Movement) {
  // transpose [2,5,3,7] perm 0,2,1,3
  std::vector<int64_t> d = {2, 5, 3, 7}, perm = {0, 2, 1, 3};
  auto x = rnd(210);
  auto st = row_major_strides(d);
  std::vector<int64_t> od(4), src(4);
  for (int k = 0; k < 4; ++k) {
    od[k] = d[perm[k]];
    src[k] = st[perm[k]];
  }
  std::vector<float> y(210);
  StridedShape s = make_strided_shape(od, {src, row_major_strides(od)}, "t");
  launch_strided_copy(4, x.data(), y.data(), 210, s, 210, nullptr);
  std::vector<double> r(210);
  for (int64_t i = 0; i < 210; ++i) {
    auto idx = unravel(i, od);
    r[i] = x[((idx[0] * 5 + idx[2]) * 3 + idx[1]) * 7 + idx[3]];
  }
  expect("transpose", y, r);
  // slice [6,8] rows 5,3,1 cols 6,3 (negative steps), via base offset + negative strides
  auto x2 = rnd(48);
  std::vector<int64_t> sd = {3, 2}, ss = {-16, -3};
  int64_t base = 5 * 8 + 6;
  std::vector<float> y2(6);
  s = make_strided_shape(sd, {ss, row_major_strides(sd)}, "t");
  launch_strided_copy(4, x2.data() + base, y2.data(), 6, s, 48, nullptr);
  std::vector<double> r2;
  for (int a : {5, 3, 1})
    for (int b : {6, 3}) r2.push_back(x2[a * 8 + b]);
  expect("slice negative steps", y2, r2);
  // gather axis 1, negative int32 indices
  auto x3 = rnd(3 * 7 * 4);
  std::vector<int32_t> ind = {6, -7, 0, -1, 2};
  std::vector<float> y3(3 * 5 * 4);
  launch_gather(4, x3.data(), ind.data(), false, y3.data(), 3, 7, 4, 5, nullptr);
  std::vector<double> r3;
  for (int o = 0; o < 3; ++o)
    for (int j = 0; j < 5; ++j)
      for (int i = 0; i < 4; ++i) {
        int k = ind[j] < 0 ? ind[j] + 7 : ind[j];
        r3.push_back(x3[(o * 7 + k) * 4 + i]);
      }
  expect("gather negative int32", y3, r3);
  // where broadcast cond [3,1,5], x [1,4,5], y [5]
  std::vector<int64_t> dc = {3, 1, 5}, dx = {1, 4, 5}, dy = {5}, out;
  broadcast_dims({dc, dx, dy}, out);
  std::vector<uint8_t> c(15);
  for (int i = 0; i < 15; ++i) c[i] = (i * 7) % 3 == 0;
  auto xx = rnd(20), yy = rnd(5);
  std::vector<float> z(60);
  s = make_strided_shape(
      out, {broadcast_strides(dc, out), broadcast_strides(dx, out), broadcast_strides(dy, out)},
      "t");
  launch_where(4, c.data(), xx.data(), yy.data(), z.data(), 60, s, nullptr);
  std::vector<double> r4(60);
  for (int64_t i = 0; i < 60; ++i) {
    auto idx = unravel(i, out);
    r4[i] = c[ravel_bcast(idx, dc)] ? xx[ravel_bcast(idx, dx)] : yy[ravel_bcast(idx, dy)];
  }
  expect("where broadcast", z, r4);
  // concat along axis 1 of [2,3,4] and [2,2,4] into [2,5,4]
  auto p = rnd(24), q = rnd(16);
  std::vector<float> cc(40);
  std::vector<int64_t> cd = {2, 5, 4};
  auto dst = row_major_strides(cd);
  s = make_strided_shape({2, 3, 4}, {row_major_strides({2, 3, 4}), dst}, "t");
  launch_strided_copy(4, p.data(), cc.data(), 24, s, 40, nullptr);
  s = make_strided_shape({2, 2, 4}, {row_major_strides({2, 2, 4}), dst}, "t");
  launch_strided_copy(4, q.data(), cc.data() + 3 * 4, 16, s, 40, nullptr);
  std::vector<double> r5;
  for (int a = 0; a < 2; ++a) {
    for (int j = 0; j < 12; ++j) r5.push_back(p[a * 12 + j]);
    for (int j = 0; j < 8; ++j) r5.push_back(q[a * 8 + j]);
  }
  expect("concat", cc, r5);
  // cast f32 -> int64 -> f16 and f32 -> bool
  auto f = rnd(100, -5, 5);
  std::vector<int64_t> iv(100);
  std::vector<__half> hv(100);
  launch_cast(CastType::F32, CastType::I64, f.data(), iv.data(), 100, nullptr);
  launch_cast(CastType::I64, CastType::F16, iv.data(), hv.data(), 100, nullptr);
  std::vector<double> r6;
  for (float v : f) r6.push_back(double(int64_t(v)));
  expect("cast f32->i64->f16", halves_to_f(hv), r6);
}

TEST(GpuKernelsEmulated, Attention) {
  check_attention({2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, {}, "plain");
  // K and V shared across heads, a per-query mask column, three key tiles (the last partial).
  check_attention({2, 3, 37, 16}, {2, 1, 70, 16}, {1, 1, 70, 24}, {37, 1}, "broadcast");
  check_attention({2, 3, 4, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}, {2, 1, 1, 7}, "padding mask");
  check_attention({1, 5, 256}, {1, 19, 256}, {1, 19, 200}, {}, "head 256 (16-key tiles)");
  check_attention({1, 2, 33, 64}, {1, 2, 65, 64}, {1, 2, 65, 64}, {}, "head 64 fp16", true);
}

// The matrix-tile kernel (attention_tiles.hip) on emulated mma.sync / MFMA: partial query and key
// tiles, masks broadcast over rows and keys, every head size it takes.
TEST(GpuKernelsEmulated, AttentionMatrixTiles) {
  check_attention({1, 2, 33, 64}, {1, 2, 65, 64}, {1, 2, 65, 64}, {}, "tiles head 64", true, true);
  check_attention({2, 1, 20, 32}, {2, 1, 130, 32}, {2, 1, 130, 32}, {2, 1, 1, 130},
                  "tiles key mask", true, true);
  check_attention({1, 3, 17, 128}, {1, 1, 9, 128}, {1, 1, 9, 128}, {17, 9}, "tiles full mask", true,
                  true);
  // Masks whose rows are copied into shared memory with each key tile (MaskKind::kStaged: sk a
  // multiple of 8): one row for every query and one row a query (BERT's exported
  // [batch, 1, sq, sk]), the last key tile partial (head 64: 64-key tiles; head 128: 32-key
  // tiles), the last block of queries partial (3 wavefronts forced).
  check_attention({2, 1, 20, 64}, {2, 1, 136, 64}, {2, 1, 136, 64}, {2, 1, 1, 136},
                  "tiles staged key mask", true, true);
  check_attention({2, 1, 20, 64}, {2, 1, 136, 64}, {2, 1, 136, 64}, {2, 1, 20, 136},
                  "tiles staged full mask", true, true);
  check_attention({1, 2, 70, 128}, {1, 2, 72, 128}, {1, 2, 72, 128}, {1, 1, 1, 72},
                  "tiles staged key mask, head 128", true, true);
  check_attention({1, 2, 70, 32}, {1, 2, 72, 32}, {1, 2, 72, 32}, {1, 1, 70, 72},
                  "tiles staged full mask, 3 waves", true, true, false, 3);
  // A mask of one value a query row (keys dimension 1): the kernel's per-row kind, which reads
  // it once a task (a finite value a row cancels in the softmax: this checks the launch's
  // dispatch and the reads, not the arithmetic).
  check_attention({1, 2, 33, 64}, {1, 2, 65, 64}, {1, 2, 65, 64}, {33, 1}, "tiles row mask", true,
                  true);
  // Head 128 takes 32-key tiles: three of them, the last partial, through both stages.
  check_attention({1, 2, 70, 128}, {1, 2, 75, 128}, {1, 2, 75, 128}, {1, 1, 1, 75},
                  "tiles head 128, several key tiles", true, true);
  // Forced block sizes (KILN_GPU_ATTENTION_WAVES): 8 is clamped to the kernel's 4, 3 leaves the
  // last block partial; a mask of full rows (msq = sq) through the hoisted mask rows.
  check_attention({2, 1, 150, 64}, {2, 1, 130, 64}, {2, 1, 130, 64}, {2, 1, 150, 130},
                  "tiles 8 waves, full mask", true, true, false, 8);
  check_attention({1, 2, 70, 32}, {1, 2, 75, 32}, {1, 2, 75, 32}, {}, "tiles 3 waves", true, true,
                  false, 3);
}

// bsnh: [.., S, N, H] operands read in place and the output written the same way, on both
// kernels (the matrix-tile one in float16, the FMA one in float32).
TEST(GpuKernelsEmulated, AttentionSequenceBeforeHeads) {
  check_attention({2, 3, 40, 64}, {2, 3, 70, 64}, {2, 3, 70, 64}, {2, 1, 1, 70}, "bsnh tiles", true,
                  true, true);
  check_attention({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}, {2, 1, 1, 7}, "bsnh fma", false, false,
                  true);
}

}  // namespace
