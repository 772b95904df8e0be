// com.microsoft MatMulNBits: the reference kernel against a dequantization written here the way
// NumPy code unpacks onnxruntime's layout (independently of ops/matmul_nbits_layout.*), its
// malformed attributes and operands refused with errors naming them, and the INT4 quantizers
// (compiler/int4_weights.*): RTN keeps each weight within half a step, GPTQ lowers the layer's
// output error below RTN's on correlated inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/int4_weights.hpp"
#include "expect_error.hpp"
#include "graph_builder.hpp"

namespace kiln {
namespace {

using testing::GraphBuilder;

// W [K][N] from B [N][blocks][block / 2] as NumPy would: np.stack([b & 15, b >> 4], -1) per
// column, cut to K; zero points unpacked the same way (empty: 8).
std::vector<double> numpy_dequantize(const std::vector<uint8_t>& b, const std::vector<float>& s,
                                     const std::vector<uint8_t>& zp, int64_t k, int64_t n,
                                     int64_t block) {
  const int64_t blocks = (k + block - 1) / block;
  std::vector<double> w(static_cast<size_t>(k * n));
  for (int64_t c = 0; c < n; ++c) {
    std::vector<int> col;  // every code of the column, padding included
    for (int64_t i = 0; i < blocks * block / 2; ++i) {
      const uint8_t byte = b[static_cast<size_t>(c * blocks * block / 2 + i)];
      col.push_back(byte & 15);
      col.push_back(byte >> 4);
    }
    std::vector<int> zcol;
    for (int64_t i = 0; i < (blocks + 1) / 2; ++i) {
      const uint8_t byte = zp.empty() ? 0x88 : zp[static_cast<size_t>(c * ((blocks + 1) / 2) + i)];
      zcol.push_back(byte & 15);
      zcol.push_back(byte >> 4);
    }
    for (int64_t r = 0; r < k; ++r) {
      const int64_t j = r / block;
      w[static_cast<size_t>(r * n + c)] =
          (col[static_cast<size_t>(r)] - zcol[static_cast<size_t>(j)]) *
          static_cast<double>(s[static_cast<size_t>(c * blocks + j)]);
    }
  }
  return w;
}

struct NBitsCase {
  int64_t k = 40, n = 6, block = 16;
  bool zero_points = true;
  std::vector<uint8_t> b;
  std::vector<float> scales;
  std::vector<uint8_t> zp;
  NBitsCase(int64_t k_, int64_t n_, int64_t block_, bool zp_, uint32_t seed)
      : k(k_), n(n_), block(block_), zero_points(zp_) {
    std::mt19937 rng(seed);
    const int64_t blocks = (k + block - 1) / block;
    for (int64_t i = 0; i < n * blocks * block / 2; ++i) b.push_back(rng() & 255);
    for (int64_t i = 0; i < n * blocks; ++i) {
      scales.push_back(std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng));
    }
    if (zero_points) {
      for (int64_t i = 0; i < n * ((blocks + 1) / 2); ++i) zp.push_back(rng() & 255);
    }
  }
};

ir::Value* u8(GraphBuilder& g, std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  Tensor t(DataType::UInt8, std::move(dims));
  std::copy(v.begin(), v.end(), t.data<uint8_t>());
  return g.graph->add_initializer(g.graph->unique_name("u8"), std::move(t));
}

std::map<std::string, ir::Attribute> attrs(int64_t k, int64_t n, int64_t block, int64_t bits = 4) {
  return {{"K", ir::Attribute(k)},
          {"N", ir::Attribute(n)},
          {"bits", ir::Attribute(bits)},
          {"block_size", ir::Attribute(block)}};
}

TEST(MatMulNBits, ReferenceMatchesNumpyStyleDequantizeForAnyBatchDims) {
  for (bool zero_points : {true, false}) {
    const NBitsCase c(40, 6, 16, zero_points, zero_points ? 7 : 8);
    GraphBuilder g(17);
    g.graph->opsets()["com.microsoft"] = 1;
    ir::Value* a = g.input("a", {2, 3, 40});
    const int64_t blocks = 3;
    std::vector<ir::Value*> in = {a, u8(g, {6, blocks, 8}, c.b),
                                  g.constant({6 * blocks}, c.scales)};
    if (zero_points) in.push_back(u8(g, {6 * 2}, c.zp));
    ir::Value* y = g.node("MatMulNBits", in, attrs(40, 6, 16), 1, "com.microsoft")[0];
    ASSERT_TRUE(y->type().shape);
    EXPECT_EQ(y->type().shape->to_string(), "[2,3,6]");
    g.output(y);
    const std::vector<RtValue> feeds = testing::random_feeds(*g.graph, 3);
    const Tensor got = testing::run_graph(g.graph, feeds)[0].tensor();
    const std::vector<double> w = numpy_dequantize(c.b, c.scales, c.zp, 40, 6, 16);
    const Tensor& x = feeds[0].tensor();
    ASSERT_EQ(got.dims(), (std::vector<int64_t>{2, 3, 6}));
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t col = 0; col < 6; ++col) {
        double want = 0;
        for (int64_t q = 0; q < 40; ++q) {
          want += x.data<float>()[r * 40 + q] * w[static_cast<size_t>(q * 6 + col)];
        }
        EXPECT_NEAR(got.data<float>()[r * 6 + col], want, 1e-5 * (1 + std::fabs(want)))
            << "row " << r << " column " << col << (zero_points ? "" : " (zero point 8)");
      }
    }
  }
}

// A node with these attributes and operands, built (shape inference checks them).
void build(std::map<std::string, ir::Attribute> at, std::vector<int64_t> b_dims,
           int64_t scale_count, std::vector<int64_t> a_dims = {3, 40}, bool g_idx = false) {
  GraphBuilder g(17);
  g.graph->opsets()["com.microsoft"] = 1;
  std::vector<Dim> ad(a_dims.begin(), a_dims.end());
  std::vector<ir::Value*> in = {
      g.input("a", ad),
      u8(g, b_dims, std::vector<uint8_t>(static_cast<size_t>(shape_numel(b_dims)), 0x88)),
      g.constant({scale_count}, std::vector<float>(static_cast<size_t>(scale_count), 1.f))};
  if (g_idx) {
    in.push_back(nullptr);
    in.push_back(g.graph->add_initializer(
        "g_idx", Tensor::from_vector<int32_t>({40}, std::vector<int32_t>(40, 0))));
  }
  g.node("MatMulNBits", in, std::move(at), 1, "com.microsoft");
}

TEST(MatMulNBits, MalformedAttributesAndOperandsAreClearErrors) {
  build(attrs(40, 6, 16), {6, 3, 8}, 18);  // well-formed: no error
  expect_error(
      [] {
        build(attrs(40, 6, 16, 8), {6, 3, 16}, 18);
      },
      ErrorCode::Unsupported, "bits=8 is not implemented");
  expect_error(
      [] {
        build(attrs(40, 6, 24), {6, 2, 12}, 12);
      },
      ErrorCode::InvalidArgument, "block_size 24 must be a power of two");
  expect_error(
      [] {
        build(attrs(40, 6, 8), {6, 5, 4}, 30);
      },
      ErrorCode::InvalidArgument, "block_size 8 must be a power of two in [16");
  expect_error(
      [] {
        build(attrs(0, 6, 16), {6, 0, 8}, 0);
      },
      ErrorCode::InvalidArgument, "attribute K 0 must be in [1, 2^31)");
  expect_error(
      [] {
        build(attrs(40, int64_t{1} << 40, 16), {6, 3, 8}, 18);
      },
      ErrorCode::InvalidArgument, "attribute N 1099511627776");
  // A blob of the wrong size, blocks that do not cover K, too few scales.
  expect_error(
      [] {
        build(attrs(40, 6, 16), {6, 3, 4}, 18);
      },
      ErrorCode::InvalidArgument,
      "B is uint8[6,3,4]; K=40 N=6 block_size=16 bits=4 need uint8[6, 3, 8]");
  expect_error(
      [] {
        build(attrs(40, 6, 16), {6, 2, 8}, 18);
      },
      ErrorCode::InvalidArgument, "need uint8[6, 3, 8]");
  expect_error(
      [] {
        build(attrs(40, 6, 16), {6, 3, 8}, 17);
      },
      ErrorCode::InvalidArgument, "scales is float[17]; need 18 float values");
  expect_error(
      [] {
        build(attrs(40, 6, 16), {6, 3, 8}, 18, {3, 41});
      },
      ErrorCode::InvalidArgument, "its last dim must be K=40");
  expect_error(
      [] {
        build(attrs(40, 6, 16), {6, 3, 8}, 18, {3, 40}, true);
      },
      ErrorCode::Unsupported, "g_idx");
  std::map<std::string, ir::Attribute> no_k = attrs(40, 6, 16);
  no_k.erase("K");
  expect_error(
      [&] {
        build(no_k, {6, 3, 8}, 18);
      },
      ErrorCode::InvalidArgument, "attribute K is required");
}

TEST(MatMulNBits, ItsBiasAddAndActivationAreFusedAndKeepTheResults) {
  const NBitsCase c(64, 8, 32, true, 4);
  auto build_graph = [&] {
    GraphBuilder g(17);
    g.graph->opsets()["com.microsoft"] = 1;
    ir::Value* a = g.input("a", {Dim::symbol("batch"), 64});
    ir::Value* y = g.node("MatMulNBits",
                          {a, u8(g, {8, 2, 16}, c.b), g.constant({16}, c.scales), u8(g, {8}, c.zp)},
                          attrs(64, 8, 32), 1, "com.microsoft")[0];
    y = g.op("Add", {y, g.random({8})});  // the bias, as exporters write it
    g.output(g.op("Relu", {y}));
    return g.graph;
  };
  std::shared_ptr<ir::Graph> fused = testing::expect_rewrite_keeps_results(
      build_graph, passes::FuseBiasActivation{}, {{"batch", 3}});
  const auto ops = testing::ops_of(*fused);
  EXPECT_EQ(ops.count("ai.kiln.FusedMatMulNBits"), 1u);
  EXPECT_EQ(ops.count("Relu"), 0u);
  EXPECT_EQ(ops.count("Add"), 0u);
  EXPECT_EQ(ops.count("com.microsoft.MatMulNBits"), 0u);
}

std::vector<float> random_weight(int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> w(static_cast<size_t>(k * n));
  for (float& v : w) v = d(rng) + 0.2f;  // off-centre, so asymmetric blocks have a zero point
  return w;
}

TEST(Int4Weights, RoundToNearestKeepsEveryWeightWithinHalfAStep) {
  const int64_t k = 70, n = 5, block = 32;  // a short last block
  const std::vector<float> w = random_weight(k, n, 11);
  for (bool symmetric : {false, true}) {
    const compiler::Int4Weight q = compiler::quantize_int4_rtn(w.data(), k, n, {block, symmetric});
    ASSERT_EQ(q.codes.size(), static_cast<size_t>(n * 3 * 16));
    ASSERT_EQ(q.zero_points.size(), symmetric ? 0u : static_cast<size_t>(n * 2));
    const std::vector<double> dq = numpy_dequantize(q.codes, q.scales, q.zero_points, k, n, block);
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        const size_t j = static_cast<size_t>(c * 3 + r / block);
        const double step = std::fabs(q.scales[j]);
        const size_t i = static_cast<size_t>(r * n + c);
        // Inside the grid, half a step; at its ends (code 0 or 15) a value may be clipped by up
        // to a step more, as the integer zero point (or symmetric's 7 steps on one side) leaves
        // the grid short of the block's range.
        const double zp = q.zero_points.empty()
                              ? 8.0
                              : (q.zero_points[static_cast<size_t>(c * 2 + (r / block) / 2)] >>
                                 ((r / block) % 2 * 4)) &
                                    15;
        const double code = dq[i] / q.scales[j] + zp;
        const bool inside = code > 0.5 && code < 14.5;
        EXPECT_LE(std::fabs(dq[i] - w[i]), (inside ? 0.5 : 1.0) * step + 1e-6) << r << "," << c;
      }
    }
    if (symmetric) {  // the block's extreme sits on code 0, exactly
      double extreme = 0;
      for (int64_t r = 0; r < block; ++r) {
        if (std::fabs(w[static_cast<size_t>(r * n)]) > std::fabs(extreme)) {
          extreme = w[static_cast<size_t>(r * n)];
        }
      }
      EXPECT_NEAR(-8.0 * q.scales[0], extreme, 1e-6);
    }
  }
}

TEST(Int4Weights, GptqLowersTheOutputErrorBelowRoundToNearest) {
  const int64_t k = 64, n = 12, rows = 400, block = 32;
  const std::vector<float> w = random_weight(k, n, 5);
  // Correlated inputs with uneven channel scales: what makes GPTQ's weighting matter.
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const float common = d(rng);
    for (int64_t i = 0; i < k; ++i) {
      x[static_cast<size_t>(r * k + i)] = (common + 0.3f * d(rng)) * (1.f + float(i % 7));
    }
  }
  std::vector<double> gram(static_cast<size_t>(k * k), 0.0);
  compiler::add_to_gram(gram, x.data(), rows, k);
  auto output_error = [&](const compiler::Int4Weight& q) {
    const std::vector<double> dq = numpy_dequantize(q.codes, q.scales, q.zero_points, k, n, block);
    double e = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double diff = 0;
        for (int64_t i = 0; i < k; ++i) {
          const size_t wi = static_cast<size_t>(i * n + c);
          diff += x[static_cast<size_t>(r * k + i)] * (dq[wi] - w[wi]);
        }
        e += diff * diff;
      }
    }
    return e;
  };
  for (bool symmetric : {false, true}) {
    const compiler::Int4Params p{block, symmetric};
    compiler::Int4Weight gptq;
    ASSERT_EQ(compiler::quantize_int4_gptq(w.data(), k, n, p, gram, 0.01, gptq), "");
    const double rtn = output_error(compiler::quantize_int4_rtn(w.data(), k, n, p));
    EXPECT_LT(output_error(gptq), 0.8 * rtn) << (symmetric ? "symmetric" : "asymmetric");
  }
}

}  // namespace
}  // namespace kiln
