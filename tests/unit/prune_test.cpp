// Pruning: the masks (magnitude, 2:4), channel removal through BatchNormalization, depthwise
// Convs and Flatten into a Gemm (the pruned model computes what the original computes with the
// removed channels' readers zeroed), the groups left alone, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/prune.hpp"
#include "compiler/prune_channels.hpp"
#include "compiler/prune_masks.hpp"
#include "expect_error.hpp"
#include "graph_builder.hpp"
#include "onnx/onnx_io.hpp"

namespace kiln {
namespace {

using compiler::ChannelCriterion;
using testing::GraphBuilder;

Tensor random_tensor(std::vector<int64_t> dims, uint32_t seed) {
  Tensor t(DataType::Float32, std::move(dims));
  std::mt19937 rng(seed);
  for (float& x : t.values<float>()) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  return t;
}

TEST(PruneMasks, TwoOfFourKeepsTheTwoLargestOfEveryFourAlongTheAxis) {
  const Tensor original = random_tensor({6, 8, 3, 3}, 1);
  Tensor w = original.clone();
  const int64_t zeros = compiler::mask_two_of_four(w, 1, "w");
  EXPECT_EQ(zeros, w.numel() / 2);
  const float* a = original.data<float>();
  const float* b = w.data<float>();
  for (int64_t o = 0; o < 6; ++o) {
    for (int64_t g = 0; g < 8; g += 4) {
      for (int64_t s = 0; s < 9; ++s) {
        std::vector<float> kept, dropped;
        for (int64_t i = g; i < g + 4; ++i) {
          const int64_t at = (o * 8 + i) * 9 + s;
          (b[at] == 0 ? dropped : kept).push_back(std::fabs(a[at]));
          if (b[at] != 0) {
            EXPECT_EQ(b[at], a[at]);
          }
        }
        ASSERT_EQ(kept.size(), 2u);
        EXPECT_GE(std::min(kept[0], kept[1]), std::max(dropped[0], dropped[1]));
      }
    }
  }
}

TEST(PruneMasks, TwoOfFourRefusesAnAxisThatIsNotAMultipleOfFour) {
  Tensor w = random_tensor({4, 3, 3, 3}, 2);
  expect_error([&] { compiler::mask_two_of_four(w, 1, "stem weight"); }, ErrorCode::InvalidArgument,
               "stem weight");
}

TEST(PruneMasks, MagnitudeZeroesTheSmallestShare) {
  const Tensor original = random_tensor({16, 10}, 3);
  Tensor w = original.clone();
  EXPECT_EQ(compiler::mask_by_magnitude(w, 0.3), 48);
  float largest_dropped = 0, smallest_kept = 10;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float m = std::fabs(original.data<float>()[i]);
    if (w.data<float>()[i] == 0) {
      largest_dropped = std::max(largest_dropped, m);
    } else {
      smallest_kept = std::min(smallest_kept, m);
    }
  }
  EXPECT_LE(largest_dropped, smallest_kept);
  expect_error([&] { compiler::mask_by_magnitude(w, 1.5); }, ErrorCode::InvalidArgument, "1.5");
}

TEST(PruneMasks, GlobalThresholdCountsOverEveryTensor) {
  Tensor small = random_tensor({100}, 4), large = random_tensor({100}, 5);
  for (float& x : small.values<float>()) x *= 0.01f;  // every entry below the other's
  const auto t = compiler::global_magnitude_threshold({&small, &large}, 0.5);
  int64_t ties = t.ties_to_zero;
  EXPECT_EQ(compiler::mask_below(small, t, ties), 100);
  EXPECT_EQ(compiler::mask_below(large, t, ties), 0);
}

// x -> Conv(4->6) -> BatchNormalization -> Relu -> depthwise Conv(6) -> Relu -> Conv(6->5)
//   -> GlobalAveragePool -> Flatten -> Gemm(5->3, transB) -> y
struct ChainModel {
  GraphBuilder b;
  ir::Value *w1, *w3, *w4;
  ir::Node* depthwise;
  ChainModel() {
    ir::Value* x = b.input("x", {1, 4, 6, 6});
    w1 = b.random({6, 4, 3, 3});
    ir::Value* h = b.op("Conv", {x, w1, b.random({6})},
                        {{"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
    h = b.op("BatchNormalization",
             {h, b.random({6}, 0.5, 2), b.random({6}), b.random({6}), b.random({6}, 0.5, 1.5)});
    h = b.op("Relu", {h});
    h = b.op("Conv", {h, b.random({6, 1, 3, 3}), b.random({6})},
             {{"group", ir::Attribute(int64_t{6})},
              {"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
    depthwise = h->producer();
    h = b.op("Relu", {h});
    w3 = b.random({5, 6, 1, 1});
    h = b.op("Conv", {h, w3, b.random({5})});
    h = b.op("GlobalAveragePool", {h});
    h = b.op("Flatten", {h});
    w4 = b.random({3, 5});
    b.output(b.op("Gemm", {h, w4, b.random({3})}, {{"transB", ir::Attribute(int64_t{1})}}));
  }
};

TEST(PruneChannels, RemovedChannelsGiveTheModelWithTheirReadersZeroed) {
  ChainModel pruned, zeroed;
  const auto layers = compiler::find_weight_layers(*pruned.b.graph, {"Conv", "Gemm"}, {});
  const auto groups = compiler::find_channel_groups(*pruned.b.graph, layers);
  // The first Conv (through BN, Relu and the depthwise Conv) and the last Conv (through pooling
  // and Flatten into the Gemm); the depthwise Conv and the Gemm (graph output) are left alone.
  ASSERT_EQ(groups.groups.size(), 2u);
  ASSERT_EQ(groups.left_alone.size(), 2u);
  EXPECT_NE(groups.left_alone[1].second.find("graph output"), std::string::npos);
  const std::vector<int64_t> keep1 = {0, 2, 5}, keep2 = {1, 4};
  compiler::remove_channels(*pruned.b.graph, groups.groups[0], keep1);
  compiler::remove_channels(*pruned.b.graph, groups.groups[1], keep2);
  for (ir::Node* n : pruned.b.graph->nodes()) onnx_io::infer_node(*n, {});
  ir::validate_graph(*pruned.b.graph);
  EXPECT_EQ(pruned.w1->constant().dims(), (std::vector<int64_t>{3, 4, 3, 3}));
  EXPECT_EQ(pruned.w3->constant().dims(), (std::vector<int64_t>{2, 3, 1, 1}));
  EXPECT_EQ(pruned.w4->constant().dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(pruned.depthwise->attribute("group")->get<int64_t>("group"), 3);

  // The original with the removed channels' readers zeroed: w3's input channels 1, 3, 4 and
  // w4's input features 0, 2, 3.
  Tensor w3 = zeroed.w3->constant().clone();
  for (int64_t o = 0; o < 5; ++o) {
    for (int64_t c : {1, 3, 4}) w3.data<float>()[o * 6 + c] = 0;
  }
  zeroed.w3->set_constant(w3);
  Tensor w4 = zeroed.w4->constant().clone();
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t c : {0, 2, 3}) w4.data<float>()[o * 5 + c] = 0;
  }
  zeroed.w4->set_constant(w4);
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    const auto feeds = testing::random_feeds(*zeroed.b.graph, seed);
    testing::expect_same_values(testing::run_graph(pruned.b.graph, feeds),
                                testing::run_graph(zeroed.b.graph, feeds), 1e-5, 1e-5);
  }
}

TEST(PruneChannels, BiasCompensationMakesRemovingAConstantChannelExact) {
  // Channel 1 of the first Conv has a zero filter and bias 3: after Relu it is 3 everywhere, which
  // the second Conv's bias can take over exactly.
  auto build = [](GraphBuilder& b) {
    ir::Value* x = b.input("x", {1, 2, 4, 4});
    ir::Value* h = b.op("Conv", {x, b.constant({2, 2, 1, 1}, {0.5f, -1.f, 0.f, 0.f}),
                                 b.constant({2}, {0.1f, 3.f})});
    h = b.op("Relu", {h});
    ir::Value* y = b.op("Conv", {h, b.constant({3, 2, 1, 1}, {1, 2, -1, 0.5f, 0.25f, 4}),
                                 b.constant({3}, {0, 1, 2})});
    b.output(y);
    return h;
  };
  GraphBuilder original, pruned;
  build(original);
  ir::Value* relu = build(pruned);
  const auto groups = compiler::find_channel_groups(
      *pruned.graph, compiler::find_weight_layers(*pruned.graph, {"Conv"}, {}));
  ASSERT_EQ(groups.groups.size(), 1u);
  const compiler::ChannelMeans means = {{relu->name(), {0.3, 3.0}}};
  compiler::remove_channels(*pruned.graph, groups.groups[0], {0}, &means);
  for (ir::Node* n : pruned.graph->nodes()) onnx_io::infer_node(*n, {});
  const auto feeds = testing::random_feeds(*original.graph, 3);
  testing::expect_same_values(testing::run_graph(pruned.graph, feeds),
                              testing::run_graph(original.graph, feeds), 1e-5, 1e-5);
}

TEST(PruneChannels, ContributionRanksByDeviationTimesReaderWeight) {
  ChainModel m;
  const auto groups = compiler::find_channel_groups(
      *m.b.graph, compiler::find_weight_layers(*m.b.graph, {"Conv", "Gemm"}, {}));
  ASSERT_EQ(groups.groups.size(), 2u);
  const compiler::ChannelGroup& last = groups.groups[1];  // read by the Gemm through Flatten
  const std::vector<double> sd = {1, 0, 2, 0.5, 3};
  const compiler::ChannelMeans stds = {{last.consumers[0]->input(0)->name(), sd}};
  const auto score = compiler::channel_importance(last, ChannelCriterion::Contribution, &stds);
  const Tensor& w = m.w4->constant();  // [3, 5], transB
  for (int64_t c = 0; c < 5; ++c) {
    double n2 = 0;
    for (int64_t o = 0; o < 3; ++o)
      n2 += double(w.data<float>()[o * 5 + c]) * w.data<float>()[o * 5 + c];
    EXPECT_NEAR(score[c], sd[c] * std::sqrt(n2), 1e-9);
  }
  expect_error([&] { compiler::channel_importance(last, ChannelCriterion::Contribution); },
               ErrorCode::InvalidArgument, "no channel statistics");
}

TEST(PruneChannels, KeepsTheMostImportantChannelsInOrder) {
  EXPECT_EQ(compiler::channels_to_keep({0.1, 5, 0.2, 3, 4}, 0.4, 1),
            (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(compiler::channels_to_keep({0.1, 5, 0.2, 3, 4}, 0.9, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(compiler::channels_to_keep({0.1, 5, 0.2, 3, 4}, 0.6, 4).size(), 4u);
  expect_error(
      [] {
        compiler::channels_to_keep({1, 2}, 1.0, 1);
      },
      ErrorCode::InvalidArgument, "[0, 1)");
}

TEST(PruneChannels, BatchNormGammaRanksByTheFollowingGamma) {
  ChainModel m;
  const auto layers = compiler::find_weight_layers(*m.b.graph, {"Conv"}, {});
  const auto groups = compiler::find_channel_groups(*m.b.graph, layers);
  ASSERT_FALSE(groups.groups.empty());
  const auto score =
      compiler::channel_importance(groups.groups[0], ChannelCriterion::BatchNormGamma);
  const Tensor& gamma = groups.groups[0].batch_norm_scale->constant();
  for (int64_t c = 0; c < 6; ++c) EXPECT_FLOAT_EQ(score[c], std::fabs(gamma.data<float>()[c]));
  // The second group has no BatchNormalization: the error names the layer.
  expect_error(
      [&] { compiler::channel_importance(groups.groups[1], ChannelCriterion::BatchNormGamma); },
      ErrorCode::InvalidArgument, groups.groups[1].producer.display);
}

TEST(PruneChannels, AResidualAddLeavesTheLayerAloneAndSaysWhy) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {1, 4, 5, 5});
  ir::Value* h = b.op("Conv", {x, b.random({4, 4, 1, 1})});
  h = b.op("Relu", {h});
  h = b.op("Add", {h, x});
  b.output(b.op("Conv", {h, b.random({2, 4, 1, 1})}));
  const auto groups =
      compiler::find_channel_groups(*b.graph, compiler::find_weight_layers(*b.graph, {"Conv"}, {}));
  EXPECT_TRUE(groups.groups.empty());
  ASSERT_EQ(groups.left_alone.size(), 2u);
  EXPECT_NE(groups.left_alone[0].second.find("residual"), std::string::npos)
      << groups.left_alone[0].second;
}

TEST(PruneChannels, BranchesJoinedByAnAddArePrunedTogether) {
  // a = Conv(x), b = Conv(Relu(a)) -> Add(a, b) -> Conv: a's and b's producers share channels.
  GraphBuilder b;
  ir::Value* x = b.input("x", {1, 3, 5, 5});
  ir::Value* a = b.op("Conv", {x, b.random({4, 3, 1, 1}), b.random({4})});
  ir::Value* c = b.op("Conv", {b.op("Relu", {a}), b.random({4, 4, 1, 1}), b.random({4})});
  ir::Value* sum = b.op("Add", {a, c});
  b.output(b.op("Conv", {sum, b.random({2, 4, 1, 1})}));
  const auto layers = compiler::find_weight_layers(*b.graph, {"Conv"}, {});
  auto groups = compiler::find_channel_groups(*b.graph, layers);
  ASSERT_EQ(groups.groups.size(), 1u);
  ASSERT_EQ(groups.groups[0].joined.size(), 1u);
  EXPECT_EQ(groups.groups[0].joined[0].node, c->producer());
  EXPECT_EQ(groups.groups[0].consumers.size(), 2u);  // the second Conv and the last
  EXPECT_TRUE(compiler::find_channel_groups(*b.graph, layers, false).groups.empty());
  compiler::remove_channels(*b.graph, groups.groups[0], {1, 3});
  for (ir::Node* n : b.graph->nodes()) onnx_io::infer_node(*n, {});
  ir::validate_graph(*b.graph);
  EXPECT_EQ(c->producer()->input(1)->constant().dims(), (std::vector<int64_t>{2, 2, 1, 1}));
  const auto feeds = testing::random_feeds(*b.graph, 1);
  EXPECT_EQ(testing::run_graph(b.graph, feeds)[0].tensor().dims(),
            (std::vector<int64_t>{1, 2, 5, 5}));
}

TEST(PruneChannels, MatMulFeaturesFollowIntoTheNextMatMul) {
  // x [2, 6] -> MatMul [6, 5] -> Add per-feature bias -> Relu -> MatMul [5, 3] -> y
  auto build = [](GraphBuilder& b, ir::Value** w2) {
    ir::Value* x = b.input("x", {2, 6});
    ir::Value* h = b.op("MatMul", {x, b.random({6, 5})});
    h = b.op("Relu", {b.op("Add", {h, b.random({5})})});
    *w2 = b.random({5, 3});
    b.output(b.op("MatMul", {h, *w2}));
  };
  GraphBuilder pruned, zeroed;
  ir::Value *w2p, *w2z;
  build(pruned, &w2p);
  build(zeroed, &w2z);
  const auto groups = compiler::find_channel_groups(
      *pruned.graph, compiler::find_weight_layers(*pruned.graph, {"MatMul"}, {}));
  ASSERT_EQ(groups.groups.size(), 1u);
  compiler::remove_channels(*pruned.graph, groups.groups[0], {0, 3});
  for (ir::Node* n : pruned.graph->nodes()) onnx_io::infer_node(*n, {});
  EXPECT_EQ(w2p->constant().dims(), (std::vector<int64_t>{2, 3}));
  Tensor w = w2z->constant().clone();
  for (int64_t r : {1, 2, 4}) {
    for (int64_t c = 0; c < 3; ++c) w.data<float>()[r * 3 + c] = 0;
  }
  w2z->set_constant(w);
  const auto feeds = testing::random_feeds(*zeroed.graph, 4);
  testing::expect_same_values(testing::run_graph(pruned.graph, feeds),
                              testing::run_graph(zeroed.graph, feeds), 1e-5, 1e-5);
}

TEST(PruneChannels, AConcatLeavesTheLayerAloneAndSaysWhy) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {1, 3, 4, 4});
  ir::Value* a = b.op("Conv", {x, b.random({4, 3, 1, 1})});
  ir::Value* cat = b.op("Concat", {a, x}, {{"axis", ir::Attribute(int64_t{1})}});
  b.output(b.op("Conv", {cat, b.random({2, 7, 1, 1})}));
  const auto groups =
      compiler::find_channel_groups(*b.graph, compiler::find_weight_layers(*b.graph, {"Conv"}, {}));
  EXPECT_TRUE(groups.groups.empty());
  ASSERT_FALSE(groups.left_alone.empty());
  EXPECT_NE(groups.left_alone[0].second.find("Concat"), std::string::npos)
      << groups.left_alone[0].second;
}

TEST(PruneTargets, AComputedWeightIsSkippedWithItsName) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {2, 3});
  ir::Value* w = b.input("w", {3, 4});
  b.output(b.op("MatMul", {x, w}));
  const auto layers = compiler::find_weight_layers(*b.graph, {"MatMul"}, {});
  EXPECT_TRUE(layers.layers.empty());
  ASSERT_EQ(layers.skipped.size(), 1u);
  EXPECT_NE(layers.skipped[0].second.find("'w' is computed, not an initializer"),
            std::string::npos);
}

class PruneModelTest : public ::testing::Test {
 protected:
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln_prune_test";
  void SetUp() override { std::filesystem::create_directories(dir); }
  std::string save(const std::shared_ptr<ir::Graph>& g, const std::string& name) {
    ir::Model m;
    m.graph = g;
    m.ir_version = 8;
    const std::string path = (dir / name).string();
    onnx_io::save_model_file(m, path);
    return path;
  }
};

TEST_F(PruneModelTest, ChannelPruningWritesASmallerModelThatPassesAtRatioZeroAndReportsSizes) {
  ChainModel m;
  compiler::PruneOptions o;
  o.model_path = save(m.b.graph, "chain.onnx");
  o.output_path = (dir / "chain.pruned.onnx").string();
  o.ratio = 0.5;
  o.allow_drift = true;
  o.residual_groups = false;
  const compiler::PruneResult r = compiler::prune_model(o);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].channels_after, 3);
  EXPECT_LT(r.after.parameters, r.before.parameters);
  EXPECT_LT(r.after.flops, r.before.flops);
  EXPECT_LT(r.after.file_bytes, r.before.file_bytes);
  const ir::Model written = onnx_io::import_model_file(o.output_path);
  EXPECT_EQ(written.graph->find_value(m.w1->name())->constant().dims()[0], 3);
}

TEST_F(PruneModelTest, TheGateRefusesAModelThatMissesItAndNamesTheLayers) {
  ChainModel m;
  compiler::PruneOptions o;
  o.model_path = save(m.b.graph, "chain2.onnx");
  o.output_path = (dir / "chain2.pruned.onnx").string();
  o.ratio = 0.8;
  o.min_cosine = 0.9999;
  o.bias_compensation = false;
  std::filesystem::remove(o.output_path);
  expect_error([&] { compiler::prune_model(o); }, ErrorCode::InvalidArgument, "not written");
  EXPECT_FALSE(std::filesystem::exists(o.output_path));
}

TEST_F(PruneModelTest, BadInputGetsAnErrorNamingIt) {
  ChainModel m;
  compiler::PruneOptions o;
  o.model_path = save(m.b.graph, "chain3.onnx");
  o.output_path = (dir / "out.onnx").string();
  o.ratio = 1.0;
  expect_error([&] { compiler::prune_model(o); }, ErrorCode::InvalidArgument, "ratio 1");
  o.ratio = 0.5;
  o.layer_ratios["no such layer"] = 0.5;
  expect_error([&] { compiler::prune_model(o); }, ErrorCode::InvalidArgument, "no such layer");
  o.layer_ratios.clear();
  { std::ofstream(dir / "garbage.onnx") << "this is not a model"; }
  o.model_path = (dir / "garbage.onnx").string();
  EXPECT_THROW(compiler::prune_model(o), Error);
}

TEST_F(PruneModelTest, ALayerWhoseWeightIsNotAnInitializerIsNamedWhenAsked) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {2, 3});
  ir::Value* w = b.input("w", {3, 4});
  b.output(b.op("MatMul", {x, w}));
  compiler::PruneOptions o;
  o.model_path = save(b.graph, "computed.onnx");
  o.output_path = (dir / "computed.pruned.onnx").string();
  o.method = compiler::PruneMethod::Magnitude;
  expect_error([&] { compiler::prune_model(o); }, ErrorCode::InvalidArgument,
               "'w' is computed, not an initializer");
}

}  // namespace
}  // namespace kiln
