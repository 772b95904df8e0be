// Kiln's own GEMM (gemm.hip) on the host emulation against a plain loop in double: FMA tiles in
// float32 and float16, and the matrix-instruction tiles in float16 with the instruction
// emulated from its lane layout (mma.sync m16n8k16 in the 32-lane build, MFMA 16x16x16 in the
// 64-lane one). Odd sizes, K = 1, both transposes, batches with a broadcast operand, every
// shape of C, activations, the aligned (16-byte) and the element-wise staging, every block tile
// (forced), the choice.
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

struct Shape {
  int64_t m, n, k, batch = 1;
  bool trans_a = false, trans_b = false;
  bool broadcast_a = false, broadcast_b = false;  // one matrix for every batch entry
  enum class C { None, Row, Column, Scalar, Full } c = C::None;
  float alpha = 1.f, beta = 0.f;
  GemmActivation act = GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;
  int multiprocessors = 1000;  // by shape: the smallest tile where every tile has its own
  const char* tile = nullptr;  // a forced block tile (GemmArgs::tile)
  bool split = false;          // partials for split-K (gemm_partial_floats); it must split
};

double activate(double x, const Shape& s) {
  switch (s.act) {
    case GemmActivation::Relu:
      return kiln::point::relu(x);
    case GemmActivation::Clip:
      return kiln::point::clip(x, double(s.act_alpha), double(s.act_beta));
    case GemmActivation::Gelu:
      return kiln::point::gelu_erf(x);
    case GemmActivation::Sigmoid:
      return kiln::point::sigmoid(x);
    default:
      return x;
  }
}

// Rounds v to fp16 and back when `half`: the operands both sides read.
std::vector<float> random_values(size_t n, bool half, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = half ? __half2float(__float2half(d(rng))) : d(rng);
  return v;
}

void check(const Shape& s, FloatType type, bool matrix_tiles, const std::string& what) {
  SCOPED_TRACE(what);
  const bool half = type == FloatType::F16;
  std::mt19937 rng(7);
  const int64_t ba = s.broadcast_a ? 1 : s.batch, bb = s.broadcast_b ? 1 : s.batch;
  std::vector<float> a = random_values(size_t(ba * s.m * s.k), half, rng);
  std::vector<float> b = random_values(size_t(bb * s.k * s.n), half, rng);
  int64_t c_rows = 0, c_cols = 0;
  switch (s.c) {
    case Shape::C::None:
      break;
    case Shape::C::Row:
      c_rows = 1, c_cols = s.n;
      break;
    case Shape::C::Column:
      c_rows = s.m, c_cols = 1;
      break;
    case Shape::C::Scalar:
      c_rows = 1, c_cols = 1;
      break;
    case Shape::C::Full:
      c_rows = s.m, c_cols = s.n;
      break;
  }
  std::vector<float> c = random_values(size_t(c_rows * c_cols), half, rng);
  const int64_t c_rs = c_rows == 1 ? 0 : c_cols, c_cs = c_cols == 1 ? 0 : 1;

  // Reference: op(A) [m, k] (A stored [k, m] when transposed), op(B) [k, n].
  std::vector<double> ref(size_t(s.batch * s.m * s.n));
  for (int64_t z = 0; z < s.batch; ++z) {
    const float* pa = a.data() + (s.broadcast_a ? 0 : z * s.m * s.k);
    const float* pb = b.data() + (s.broadcast_b ? 0 : z * s.k * s.n);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < s.k; ++q) {
          const double va = s.trans_a ? pa[q * s.m + i] : pa[i * s.k + q];
          const double vb = s.trans_b ? pb[j * s.k + q] : pb[q * s.n + j];
          acc += va * vb;
        }
        double v = s.alpha * acc;
        if (s.c != Shape::C::None) v += s.beta * c[size_t(i * c_rs + j * c_cs)];
        ref[size_t((z * s.m + i) * s.n + j)] = activate(v, s);
      }
    }
  }

  std::vector<float> y(ref.size());
  std::vector<__half> ah, bh, ch, yh(ref.size());
  auto to_halves = [](const std::vector<float>& f) {
    std::vector<__half> h;
    for (float v : f) h.push_back(__float2half(v));
    return h;
  };
  GemmArgs args;
  args.type = type;
  if (half) {
    ah = to_halves(a), bh = to_halves(b), ch = to_halves(c);
    args.a = ah.data(), args.b = bh.data(), args.y = yh.data();
    args.c = s.c == Shape::C::None ? nullptr : ch.data();
  } else {
    args.a = a.data(), args.b = b.data(), args.y = y.data();
    args.c = s.c == Shape::C::None ? nullptr : c.data();
  }
  args.m = s.m, args.n = s.n, args.k = s.k, args.batch = s.batch;
  args.trans_a = s.trans_a, args.trans_b = s.trans_b;
  args.stride_a = s.broadcast_a ? 0 : s.m * s.k;
  args.stride_b = s.broadcast_b ? 0 : s.k * s.n;
  args.alpha = s.alpha, args.beta = s.beta;
  args.c_row_stride = c_rs, args.c_col_stride = c_cs;
  args.activation = s.act, args.act_alpha = s.act_alpha, args.act_beta = s.act_beta;
  args.matrix_tiles = matrix_tiles;
  args.multiprocessors = s.multiprocessors;
  args.tile = s.tile;
  std::vector<float> partials;
  if (s.split) {
    partials.assign(size_t(gemm_partial_floats(args)), std::nanf(""));  // all written first
    args.partials = partials.data();
    args.partial_capacity = int64_t(partials.size());
    ASSERT_GT(gemm_splits(args), 1) << what;
  }
  ASSERT_EQ(launch_gemm(args, nullptr), hipSuccess);
  if (half) {
    for (size_t i = 0; i < y.size(); ++i) y[i] = __half2float(yh[i]);
  }
  // float32: the sum's rounding; float16: one rounding of the result (2^-11 relative) besides.
  // float32's absolute error grows with the terms summed (K = 232: 1.1e-5 near a cancellation).
  const double rtol = half ? 1.5e-3 : 1e-5,
               atol = half ? 1e-3 : 1e-5 * std::max<double>(1.0, double(s.k) / 64);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double e = std::abs(y[i] - ref[i]) / (atol + rtol * std::abs(ref[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, 1.0) << "worst at " << at << ": " << y[at] << " vs " << ref[at] << " ("
                        << gemm_tile_name(args) << ")";
}

// The block tiles of `type` (gemm_tile_names).
std::vector<std::string> tiles_of(FloatType type) {
  std::vector<std::string> out;
  std::string all = gemm_tile_names(type);
  for (size_t at = 0; at < all.size();) {
    const size_t end = std::min(all.find(' ', at), all.size());
    out.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Each shape through float32 FMA tiles, float16 FMA tiles and float16 matrix tiles, the
// tile chosen by shape; `every_tile`: the matrix tiles (and float32) in each block tile too.
void check_all(const Shape& s, const std::string& what, bool every_tile = false) {
  check(s, FloatType::F32, false, what + " f32");
  check(s, FloatType::F16, false, what + " f16 fma");
  check(s, FloatType::F16, true, what + " f16 matrix");
  if (!every_tile) return;
  for (FloatType type : {FloatType::F16, FloatType::F32}) {
    for (const std::string& tile : tiles_of(type)) {
      Shape forced = s;
      forced.tile = tile.c_str();
      check(forced, type, type == FloatType::F16, what + " tile " + tile);
    }
  }
}

}  // namespace

TEST(GpuGemmEmulated, OddSizes) {
  check_all({.m = 37, .n = 29, .k = 45}, "37x29x45");
  check_all({.m = 5, .n = 7, .k = 1}, "k 1");
  check_all({.m = 1, .n = 1, .k = 3}, "1x1x3");
}

TEST(GpuGemmEmulated, AlignedStagingWithEdges) {
  check_all({.m = 70, .n = 72, .k = 40}, "70x72x40", true);
}

TEST(GpuGemmEmulated, Transposes) {
  for (int t = 1; t < 4; ++t) {
    Shape s{.m = 33, .n = 41, .k = 20, .trans_a = (t & 1) != 0, .trans_b = (t & 2) != 0};
    check_all(s, "trans " + std::to_string(t));
    s.k = 48, s.m = 40, s.n = 24;  // 16-byte rows in every layout
    check_all(s, "aligned trans " + std::to_string(t), true);
  }
}

TEST(GpuGemmEmulated, BatchesAndBroadcasts) {
  check_all({.m = 19, .n = 21, .k = 33, .batch = 3}, "batched");
  check_all({.m = 9, .n = 16, .k = 16, .batch = 2, .broadcast_a = true}, "broadcast A");
  check_all({.m = 9, .n = 10, .k = 24, .batch = 3, .broadcast_b = true}, "broadcast B");
}

TEST(GpuGemmEmulated, EpilogueCAndActivations) {
  using C = Shape::C;
  check_all({.m = 20, .n = 41, .k = 33, .c = C::Row, .beta = 1.f, .act = GemmActivation::Relu},
            "bias relu");
  check_all({.m = 20, .n = 41, .k = 33, .c = C::Full, .alpha = 0.5f, .beta = 2.f}, "full C");
  check_all({.m = 20, .n = 9, .k = 8, .c = C::Column, .beta = 0.5f, .act = GemmActivation::Gelu},
            "column C gelu");
  check_all({.m = 7,
             .n = 11,
             .k = 9,
             .c = C::Scalar,
             .beta = 0.25f,
             .act = GemmActivation::Clip,
             .act_alpha = 0.f,
             .act_beta = 0.5f},
            "scalar C clip");
  check_all({.m = 6, .n = 5, .k = 0, .c = C::Row, .beta = 1.f, .act = GemmActivation::Sigmoid},
            "k 0: the epilogue alone");
}

TEST(GpuGemmEmulated, BlockTilesWithEdges) {
  // Past one block in M and N, several pipeline stages in K (and a last partial one).
  check_all({.m = 130, .n = 136, .k = 232}, "edges", true);
  check_all({.m = 129, .n = 131, .k = 37, .trans_b = true}, "transB, unaligned", true);
  check_all({.m = 136, .n = 72, .k = 96, .trans_a = true, .c = Shape::C::Row, .beta = 1.f},
            "transA, bias", true);
}

TEST(GpuGemmEmulated, SplitK) {
  using C = Shape::C;
  // One output tile and a long reduction: parts of the reduction as blocks of their own, and
  // their sum with the epilogue in a second kernel. A last part shorter than the others, K not
  // a multiple of the step, bias and activation, batches, both transposes, element staging.
  const Shape base{.m = 20, .n = 24, .k = 600, .multiprocessors = 132, .split = true};
  check_all(base, "split");
  Shape s = base;
  s.k = 601, s.c = C::Row, s.beta = 1.f, s.act = GemmActivation::Relu, s.alpha = 0.5f;
  check_all(s, "split, K 601, bias relu");
  s = base;
  s.batch = 2, s.trans_a = true, s.trans_b = true, s.c = C::Full, s.beta = 0.5f;
  s.act = GemmActivation::Gelu;
  check_all(s, "split, batched, transposed, full C, gelu");
  s = base;
  s.m = 13, s.n = 7, s.k = 515;  // rows not 16-byte aligned: staged element by element
  check_all(s, "split, unaligned");
}

TEST(GpuGemmEmulated, SplitChoice) {
  GemmArgs a;
  a.type = FloatType::F16;
  a.multiprocessors = 132;
  a.m = 49, a.n = 512, a.k = 2048;  // ResNet-50 b1's last 1x1: 8 tiles for 132 multiprocessors
  const int64_t floats = gemm_partial_floats(a);
  EXPECT_EQ(floats % (a.m * a.n), 0);
  EXPECT_GE(floats / (a.m * a.n), 8);
  EXPECT_EQ(gemm_splits(a), 1);  // no partials given: no split
  std::vector<float> partials(static_cast<size_t>(floats));
  a.partials = partials.data();
  a.partial_capacity = floats;
  EXPECT_EQ(gemm_splits(a), floats / (a.m * a.n));
  a.partial_capacity = a.m * a.n;  // room for one part: no split
  EXPECT_EQ(gemm_splits(a), 1);
  a.partial_capacity = floats;
  a.m = 4096, a.n = 768, a.k = 768;  // BERT b32's projections fill the GPU: no split
  EXPECT_EQ(gemm_partial_floats(a), 0);
  EXPECT_EQ(gemm_splits(a), 1);
  a.m = 128, a.n = 3072, a.k = 16;  // a short reduction: no split
  EXPECT_EQ(gemm_partial_floats(a), 0);
}

TEST(GpuGemmEmulated, TileChoiceByShape) {
  GemmArgs a;
  a.type = FloatType::F16;
  a.multiprocessors = 132;
  // Fills the GPU many times: the big tile (float16 on NVIDIA's matrix tiles: its BK 64 twin).
  a.m = 64 * 56 * 56, a.n = 256, a.k = 64;
  EXPECT_STREQ(gemm_tile_name(a), "128x128x64");
  a.matrix_tiles = false;
  EXPECT_STREQ(gemm_tile_name(a), "128x128x32");
  a.matrix_tiles = true;
  a.n = 64;  // N of 64: no half-empty big tiles
  EXPECT_STREQ(gemm_tile_name(a), "128x64x32");
  a.m = 128, a.n = 768, a.k = 768;  // 6 big tiles for 132 multiprocessors: the small tile
  EXPECT_STREQ(gemm_tile_name(a), "64x64x32");
  a.tile = "128x128";  // forced
  EXPECT_STREQ(gemm_tile_name(a), "128x128x32");
  a.tile = "no such tile";  // ignored
  EXPECT_STREQ(gemm_tile_name(a), "64x64x32");
}
