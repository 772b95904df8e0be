// Gemm + BatchNormalization folding and the bias + activation fusions: each test builds the
// pattern as exporters write it, runs the pass, checks the rewritten graph and that it computes
// the same outputs as before on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph_builder.hpp"
#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"

namespace kiln {
namespace {

using testing::expect_rewrite_keeps_results;
using testing::GraphBuilder;
using testing::ops_of;
using Hist = std::map<std::string, size_t>;

std::string attr_string(const ir::Node& n, const char* name) {
  const ir::Attribute* a = n.attribute(name);
  return a ? std::get<std::string>(a->storage()) : "";
}

ir::Node* only_node(const ir::Graph& g) {
  EXPECT_EQ(g.node_count(), 1u) << ir::print_graph(g);
  return g.nodes().front();
}

ir::Value* batchnorm(GraphBuilder& b, ir::Value* x, int64_t c) {
  return b.op("BatchNormalization",
              {x, b.random({c}, 0.5f, 1.5f), b.random({c}), b.random({c}), b.random({c}, 0.2f, 2)},
              {{"epsilon", ir::Attribute(1e-3f)}});
}

TEST(FuseGemmBatchNorm, FoldsForEitherTransBAndEveryFormOfC) {
  for (int trans_b = 0; trans_b < 2; ++trans_b) {
    for (int c_form = 0; c_form < 4; ++c_form) {  // none, [N], [M, N], scalar
      SCOPED_TRACE(::testing::Message() << "transB " << trans_b << " C form " << c_form);
      auto build = [&] {
        GraphBuilder b;
        ir::Value* a = b.input("a", {4, 6});
        std::vector<ir::Value*> in = {
            a, b.random(trans_b ? std::vector<int64_t>{5, 6} : std::vector<int64_t>{6, 5})};
        if (c_form == 1) in.push_back(b.random({5}));
        if (c_form == 2) in.push_back(b.random({4, 5}));
        if (c_form == 3) in.push_back(b.random({}));
        ir::Value* y = b.op("Gemm", in,
                            {{"transB", ir::Attribute(int64_t{trans_b})},
                             {"alpha", ir::Attribute(0.75f)},
                             {"beta", ir::Attribute(1.5f)}});
        b.output(batchnorm(b, y, 5));
        return b.graph;
      };
      auto g = expect_rewrite_keeps_results(build, passes::FuseGemmBatchNorm{});
      EXPECT_EQ(ops_of(*g), (Hist{{"Gemm", 1}}));
    }
  }
}

TEST(FuseGemmBatchNorm, LeavesAGemmWhoseOutputIsReadTwice) {
  GraphBuilder b;
  ir::Value* y = b.op("Gemm", {b.input("a", {4, 6}), b.random({6, 5}), b.random({5})});
  b.output(batchnorm(b, y, 5));
  b.output(y);
  EXPECT_FALSE(passes::FuseGemmBatchNorm{}.apply(*b.graph));
}

// An activation applied to `x` the ways exporters write it.
struct ActivationCase {
  const char* name;  // the fused activation expected
  int opset;         // of the graph
  std::function<ir::Value*(GraphBuilder&, ir::Value*)> apply;
};

std::vector<ActivationCase> activation_cases() {
  using A = ir::Attribute;
  return {
      {"Relu", 13, [](GraphBuilder& b, ir::Value* x) { return b.op("Relu", {x}); }},
      {"Clip", 13,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("Clip", {x, b.scalar(-0.5f), b.scalar(0.25f)});
       }},
      {"Clip", 10,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("Clip", {x}, {{"min", A(0.0f)}, {"max", A(6.0f)}});
       }},
      {"Sigmoid", 13, [](GraphBuilder& b, ir::Value* x) { return b.op("Sigmoid", {x}); }},
      {"Silu", 13,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("Mul", {x, b.op("Sigmoid", {x})});
       }},
      {"Silu", 13,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("Mul", {b.op("Sigmoid", {x}), x});
       }},
      {"Silu", 24, [](GraphBuilder& b, ir::Value* x) { return b.op("Swish", {x}); }},
      {"HardSwish", 14, [](GraphBuilder& b, ir::Value* x) { return b.op("HardSwish", {x}); }},
      {"HardSwish", 13,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("Mul", {x, b.op("HardSigmoid", {x}, {{"alpha", A(1.0f / 6)}})});
       }},
      {"HardSigmoid", 13,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("HardSigmoid", {x}, {{"alpha", A(0.3f)}, {"beta", A(0.4f)}});
       }},
      {"LeakyRelu", 13,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("LeakyRelu", {x}, {{"alpha", A(0.1f)}});
       }},
      {"Tanh", 13, [](GraphBuilder& b, ir::Value* x) { return b.op("Tanh", {x}); }},
      {"Gelu", 20, [](GraphBuilder& b, ir::Value* x) { return b.op("Gelu", {x}); }},
      {"GeluTanh", 20,
       [](GraphBuilder& b, ir::Value* x) {
         return b.op("Gelu", {x}, {{"approximate", A(std::string("tanh"))}});
       }},
  };
}

void expect_fused(const ir::Graph& g, const char* op, const char* activation) {
  ir::Node* n = only_node(g);
  if (!n) return;
  EXPECT_EQ(n->domain(), ops::kKilnDomain);
  EXPECT_EQ(n->op_type(), op);
  EXPECT_EQ(attr_string(*n, "activation"), activation);
  EXPECT_EQ(g.opsets().at(ops::kKilnDomain), 1);
}

TEST(FuseBiasActivation, ConvWithEveryActivation) {
  for (const ActivationCase& c : activation_cases()) {
    SCOPED_TRACE(::testing::Message() << c.name << " at opset " << c.opset);
    auto build = [&] {
      GraphBuilder b(c.opset);
      ir::Value* x = b.input("x", {Dim::symbol("n"), 2, 5, 5});
      ir::Value* y = b.op("Conv", {x, b.random({3, 2, 3, 3}), b.random({3})},
                          {{"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
      b.output(c.apply(b, y));
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FuseBiasActivation{}, {{"n", 2}});
    expect_fused(*g, "FusedConv", c.name);
  }
}

TEST(FuseBiasActivation, ConvAddBiasFoldsIntoBThenFusesTheActivation) {
  for (bool has_b : {false, true}) {
    auto build = [&] {
      GraphBuilder b;
      ir::Value* x = b.input("x", {1, 2, 4, 4});
      std::vector<ir::Value*> in = {x, b.random({3, 2, 1, 1})};
      if (has_b) in.push_back(b.random({3}));
      ir::Value* y = b.op("Conv", in);
      ir::Value* biased = b.op("Add", {b.random({1, 3, 1, 1}), y});
      b.output(b.op("Relu", {biased}));
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FuseBiasActivation{});
    expect_fused(*g, "FusedConv", "Relu");
    EXPECT_EQ(g->nodes()[0]->inputs().size(), 3u);
  }
}

TEST(FuseBiasActivation, GemmWithBiasAddAndActivation) {
  for (const ActivationCase& c : activation_cases()) {
    SCOPED_TRACE(::testing::Message() << c.name << " at opset " << c.opset);
    auto build = [&] {
      GraphBuilder b(c.opset);
      ir::Value* y = b.op("Gemm", {b.input("a", {3, 4}), b.random({5, 4}), b.random({5})},
                          {{"transB", ir::Attribute(int64_t{1})}, {"beta", ir::Attribute(0.5f)}});
      b.output(c.apply(b, b.op("Add", {y, b.random({5})})));
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FuseBiasActivation{});
    expect_fused(*g, "FusedGemm", c.name);
  }
}

TEST(FuseBiasActivation, MatMulBiasAndActivationBecomeFusedMatMul) {
  for (const ActivationCase& c : activation_cases()) {
    SCOPED_TRACE(::testing::Message() << c.name << " at opset " << c.opset);
    auto build = [&] {
      GraphBuilder b(c.opset);
      ir::Value* x = b.input("x", {Dim::symbol("batch"), Dim::symbol("seq"), 8});
      ir::Value* y = b.op("MatMul", {x, b.random({8, 6})});
      b.output(c.apply(b, b.op("Add", {y, b.random({6})})));
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FuseBiasActivation{},
                                          {{"batch", 2}, {"seq", 3}});
    expect_fused(*g, "FusedMatMul", c.name);
    EXPECT_EQ(g->nodes()[0]->inputs().size(), 3u);
  }
}

TEST(FuseBiasActivation, FusedActivationsAgreeWithTheOpsOnEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector<float>(
      {9, 1}, {std::nanf(""), inf, -inf, 0.0f, -0.0f, 60.0f, -60.0f, 3.0f, -2.9f});
  for (const ActivationCase& c : activation_cases()) {
    SCOPED_TRACE(::testing::Message() << c.name << " at opset " << c.opset);
    auto build = [&] {
      GraphBuilder b(c.opset);
      ir::Value* y = b.op("MatMul", {b.input("x", {9, 1}), b.constant({1, 1}, {1.0f})});
      b.output(c.apply(b, y));
      return b.graph;
    };
    auto fused = build();
    ASSERT_TRUE(passes::FuseBiasActivation{}.apply(*fused));
    passes::EliminateDeadCode{}.apply(*fused);
    expect_fused(*fused, "FusedMatMul", c.name);
    testing::expect_same_values(testing::run_graph(fused, {x}), testing::run_graph(build(), {x}));
  }
}

TEST(FuseBiasActivation, MatMulBiasWithoutActivation) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* y = b.op("MatMul", {b.input("x", {2, 3, 8}), b.random({8, 6})});
    b.output(b.op("Add", {b.random({1, 1, 6}), y}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FuseBiasActivation{});
  expect_fused(*g, "FusedMatMul", "None");
}

TEST(FuseBiasActivation, SharedOrOutputIntermediatesAreNotFusedAway) {
  {  // The Conv output is also a graph output.
    GraphBuilder b;
    ir::Value* y = b.op("Conv", {b.input("x", {1, 2, 4, 4}), b.random({3, 2, 3, 3})});
    b.output(b.op("Relu", {y}));
    b.output(y);
    EXPECT_FALSE(passes::FuseBiasActivation{}.apply(*b.graph));
  }
  {  // The MatMul + bias result is read by the activation and by another node.
    GraphBuilder b;
    ir::Value* y = b.op("MatMul", {b.input("x", {2, 8}), b.random({8, 6})});
    ir::Value* biased = b.op("Add", {y, b.random({6})});
    b.output(b.op("Relu", {biased}));
    b.output(b.op("Neg", {biased}));
    EXPECT_TRUE(passes::FuseBiasActivation{}.apply(*b.graph));
    EXPECT_EQ(ops_of(*b.graph), (Hist{{"Neg", 1}, {"Relu", 1}, {"ai.kiln.FusedMatMul", 1}}));
  }
  {  // A bias that is not along the last dim stays an Add.
    GraphBuilder b;
    ir::Value* y = b.op("MatMul", {b.input("x", {6, 8}), b.random({8, 6})});
    b.output(b.op("Add", {y, b.random({6, 1})}));
    EXPECT_FALSE(passes::FuseBiasActivation{}.apply(*b.graph));
  }
  {  // Clip with min > max clamps everything to max: not the fused Clip.
    GraphBuilder b;
    ir::Value* y = b.op("Conv", {b.input("x", {1, 2, 4, 4}), b.random({3, 2, 3, 3})});
    b.output(b.op("Clip", {y, b.scalar(1.0f), b.scalar(-1.0f)}));
    EXPECT_FALSE(passes::FuseBiasActivation{}.apply(*b.graph));
  }
}

TEST(FuseBiasActivation, GraphOutputKeepsItsName) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* y = b.op("Conv", {b.input("x", {1, 2, 4, 4}), b.random({3, 2, 3, 3})});
    ir::Value* r = b.op("Relu", {y});
    b.graph->rename_value(r, "probs");
    b.output(r);
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FuseBiasActivation{});
  EXPECT_EQ(g->outputs()[0]->name(), "probs");
  EXPECT_EQ(g->outputs()[0]->producer()->op_type(), "FusedConv");
}

// A transformer's Q, K and V projections: three MatMuls (or FusedMatMuls with biases) of one
// input become one over the weights side by side and a Split; a MatMul of another input, one
// with another row count and one with another activation stay as they are.
TEST(MergeParallelMatMuls, SiblingProjectionsBecomeOneMatMulAndASplit) {
  for (bool fused : {false, true}) {
    for (int opset : {11, 17}) {
      SCOPED_TRACE(::testing::Message() << "fused " << fused << " opset " << opset);
      auto build = [&] {
        GraphBuilder b(opset);
        b.graph->opsets()["ai.kiln"] = 1;
        ir::Value* x = b.input("x", {3, 4, 6});
        auto projection = [&](int64_t n, const char* act) {
          if (!fused) return b.op("MatMul", {x, b.random({6, n})});
          return b.node("FusedMatMul", {x, b.random({6, n}), b.random({n})},
                        {{"activation", ir::Attribute(std::string(act))}}, 1, "ai.kiln")[0];
        };
        b.output(b.op("Relu", {projection(5, "None")}));
        b.output(b.op("Sigmoid", {projection(3, "None")}));
        b.output(projection(5, "None"));
        b.output(projection(4, "Relu"));  // another activation when fused
        b.output(b.op("MatMul", {b.input("other", {2, 4, 6}), b.random({6, 2})}));
        b.output(b.op("MatMul", {b.op("Abs", {x}), b.random({6, 7})}));
        return b.graph;
      };
      auto g = expect_rewrite_keeps_results(build, passes::MergeParallelMatMuls{});
      const std::string mm = fused ? "ai.kiln.FusedMatMul" : "MatMul";
      // Unfused, the fourth projection is a sibling too (no activation to differ).
      const size_t merged = fused ? 3 : 4;
      Hist want = {{"Split", 1}, {"Relu", 1}, {"Sigmoid", 1}, {"Abs", 1}, {"MatMul", 2}};
      want[mm] += fused ? 2 : 1;
      EXPECT_EQ(ops_of(*g), want);
      for (const ir::Node* n : g->nodes()) {
        if (n->op_type() == "Split") {
          EXPECT_EQ(n->outputs().size(), merged);
          EXPECT_EQ(n->input(0)->type().shape->dims().back().value(),
                    fused ? 13 : 17);  // 5 + 3 + 5 (+ 4)
        }
      }
    }
  }
}

TEST(MergeParallelMatMuls, GraphOutputsKeepTheirNamesAndUnsharedInputsStay) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 6});
    ir::Value* q = b.op("MatMul", {x, b.random({6, 3})});
    b.graph->rename_value(q, "query");
    b.output(q);
    b.output(b.op("Relu", {b.op("MatMul", {x, b.random({6, 2})})}));
    b.output(b.op("MatMul", {b.input("y", {2, 6}), b.random({6, 3})}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::MergeParallelMatMuls{});
  EXPECT_EQ(g->outputs()[0]->name(), "query");
  EXPECT_EQ(g->outputs()[0]->producer()->op_type(), "Split");
  EXPECT_EQ(g->outputs()[2]->producer()->op_type(), "MatMul");  // y's own projection
  // Nothing left to merge: the second run changes nothing.
  EXPECT_FALSE(passes::MergeParallelMatMuls{}.apply(*g));

  // Many rows (or rows not known when compiling): each GEMM fills the device alone.
  for (std::vector<Dim> dims : {std::vector<Dim>{600, 6}, {Dim::symbol("batch"), 6}}) {
    GraphBuilder b;
    ir::Value* x = b.input("x", dims);
    b.output(b.op("MatMul", {x, b.random({6, 3})}));
    b.output(b.op("MatMul", {x, b.random({6, 2})}));
    EXPECT_FALSE(passes::MergeParallelMatMuls{}.apply(*b.graph));
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// TensorFlow-style "same" padding: Pad(zeros on H and W, asymmetric) before a strided (here
// depthwise) convolution, read by one or two convolutions with pads of their own; the
// convolutions take the Pad's amounts and the Pad goes.
TEST(FoldPadIntoConv, ZeroSpatialPadsJoinTheConvolutions) {
  for (int variant = 0; variant < 3; ++variant) {  // one Conv; Conv + FusedConv; opset 2 Pad
    SCOPED_TRACE(variant);
    auto build = [&] {
      GraphBuilder b(variant == 2 ? 10 : 13);
      ir::Value* x = b.input("x", {1, 4, 7, 8});
      const std::vector<int64_t> pads = {0, 0, 0, 1, 0, 0, 1, 2};
      ir::Value* p = variant == 2 ? b.op("Pad", {x}, {{"pads", ir::Attribute(pads)}})
                                  : b.op("Pad", {x, b.ints(pads), b.scalar(0.f)});
      b.output(b.op("Conv", {p, b.random({4, 1, 3, 3}), b.random({4})},
                    {{"group", ir::Attribute(int64_t{4})},
                     {"strides", ir::Attribute(std::vector<int64_t>{2, 2})}}));
      if (variant == 1) {
        b.output(b.op("Conv", {p, b.random({3, 4, 1, 1})},
                      {{"pads", ir::Attribute(std::vector<int64_t>{1, 0, 0, 1})}}));
      }
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FoldPadIntoConv{});
    const Hist want = variant == 1 ? Hist{{"Conv", 2}} : Hist{{"Conv", 1}};
    EXPECT_EQ(ops_of(*g), want);
  }
}

TEST(FoldPadIntoConv, LeavesPadsItCannotFold) {
  // A non-zero value, a reflect mode, a channel pad, a Pad also read by a non-convolution, and
  // a graph-output Pad stay.
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(variant);
    GraphBuilder b;
    ir::Value* x = b.input("x", {1, 2, 6, 6});
    std::vector<int64_t> pads = {0, 0, 1, 1, 0, 0, 1, 1};
    if (variant == 2) pads[1] = 1;
    std::vector<ir::Value*> in = {x, b.ints(pads)};
    if (variant == 0) in.push_back(b.scalar(1.f));
    std::map<std::string, ir::Attribute> attrs;
    if (variant == 1) attrs.emplace("mode", ir::Attribute(std::string("reflect")));
    ir::Value* p = b.op("Pad", in, attrs);
    const int64_t c = variant == 2 ? 3 : 2;
    b.output(b.op("Conv", {p, b.random({2, c, 3, 3})}));
    if (variant == 3) b.output(b.op("Relu", {p}));
    if (variant == 4) b.output(p);
    EXPECT_FALSE(passes::FoldPadIntoConv{}.apply(*b.graph));
    EXPECT_EQ(ops_of(*b.graph).count("Pad"), 1u);
  }
}

// A ResNet block's end: Conv (with or without B) -> Add(residual) [-> Relu]; the residual on
// either side of the Add. One FusedConv(X, W, B, Z) computes the same (its reference kernel adds
// Z before the activation).
TEST(FuseConvResidual, ConvAddReluBecomesOneFusedConvWithZ) {
  for (bool has_b : {false, true}) {
    for (bool relu : {false, true}) {
      for (bool residual_first : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "B " << has_b << " relu " << relu << " residual first " << residual_first);
        auto build = [&] {
          GraphBuilder b;
          ir::Value* x = b.input("x", {1, 4, 5, 5});
          ir::Value* shortcut = b.op("Sigmoid", {b.input("s", {1, 3, 5, 5})});
          std::vector<ir::Value*> in = {x, b.random({3, 4, 3, 3})};
          if (has_b) in.push_back(b.random({3}));
          ir::Value* y =
              b.op("Conv", in, {{"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
          ir::Value* sum = residual_first ? b.op("Add", {shortcut, y}) : b.op("Add", {y, shortcut});
          b.output(relu ? b.op("Relu", {sum}) : sum);
          return b.graph;
        };
        auto g = expect_rewrite_keeps_results(build, passes::FuseConvResidual{});
        EXPECT_EQ(ops_of(*g), (Hist{{"Sigmoid", 1}, {"ai.kiln.FusedConv", 1}}));
        const ir::Node* fused = g->nodes().back();
        ASSERT_EQ(fused->inputs().size(), 4u);
        EXPECT_EQ(fused->input(3), g->nodes().front()->output(0)) << "Z is the shortcut";
        EXPECT_EQ(attr_string(*fused, "activation"), relu ? "Relu" : "None");
      }
    }
  }
}

TEST(FuseConvResidual, LeavesBroadcastAddsConstantsAndSharedResults) {
  auto build = [](int variant) {
    GraphBuilder b;
    ir::Value* x = b.input("x", {1, 2, 4, 4});
    ir::Value* y = b.op("Conv", {x, b.random({3, 2, 1, 1}), b.random({3})});
    ir::Value* other = variant == 0   ? b.input("narrow", {1, 3, 1, 1})  // broadcast
                       : variant == 1 ? b.random({1, 3, 4, 4})           // a constant: a bias
                                      : b.input("s", {1, 3, 4, 4});
    b.output(b.op("Add", {y, other}));
    if (variant == 2) b.output(y);  // the Conv's result is read twice
    return b.graph;
  };
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    EXPECT_FALSE(passes::FuseConvResidual{}.apply(*build(variant)));
  }
}
// The bias and activation fusion, then the clip's move into depthwise readers (as the GPU's
// passes run them).
struct FuseThenFoldClip {
  std::string_view name() const { return "fuse_bias_activation+fold_clip_into_depthwise"; }
  bool apply(ir::Graph& g) const {
    passes::FuseBiasActivation{}.apply(g);
    return passes::FoldClipIntoDepthwise{}.apply(g);
  }
};

// MobileNetV2's inverted residual: a 1x1 expansion ending in ReLU6, read by a depthwise 3x3 (also
// ReLU6). The expansion keeps Relu; the depthwise FusedConv clips its input at 6 as it reads it.
// Weights up to 3 make the expansion's results pass 6 often, so the move is exercised.
std::shared_ptr<ir::Graph> expansion_then_depthwise(int variant) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {1, 4, 6, 6});
  ir::Value* e = b.op("Conv", {x, b.random({8, 4, 1, 1}, -3, 3), b.random({8})});
  const float lo = variant == 3 ? -1.f : 0.f;
  ir::Value* clipped = b.op("Clip", {e, b.scalar(lo), b.scalar(6.f)});
  const bool grouped = variant != 2;  // 2: a plain 3x3 convolution reads the expansion
  ir::Value* d = b.op("Conv", {clipped, b.random({8, grouped ? 1 : 8, 3, 3}), b.random({8})},
                      {{"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})},
                       {"group", ir::Attribute(int64_t{grouped ? 8 : 1})}});
  b.output(b.op("Clip", {d, b.scalar(0.f), b.scalar(6.f)}));
  if (variant == 1) b.output(clipped);  // the clipped expansion is also a graph output
  return b.graph;
}

TEST(FoldClipIntoDepthwise, ExpansionKeepsReluAndTheDepthwiseReaderClipsItsInput) {
  auto g =
      expect_rewrite_keeps_results([] { return expansion_then_depthwise(0); }, FuseThenFoldClip{});
  ASSERT_EQ(g->node_count(), 2u) << ir::print_graph(*g);
  const ir::Node* expansion = g->nodes().front();
  const ir::Node* depthwise = g->nodes().back();
  EXPECT_EQ(attr_string(*expansion, "activation"), "Relu");
  EXPECT_EQ(expansion->attribute("activation_params"), nullptr);
  EXPECT_EQ(attr_string(*depthwise, "activation"), "Clip");
  const ir::Attribute* max = depthwise->attribute("input_max");
  ASSERT_NE(max, nullptr);
  EXPECT_EQ(std::get<float>(max->storage()), 6.f);
}

TEST(FoldClipIntoDepthwise, LeavesGraphOutputsOtherReadersAndOtherClips) {
  // 1: the clipped values are a graph output; 2: an ungrouped convolution reads them; 3: the
  // Clip's lower bound is not 0 (no Relu to keep).
  for (int variant = 1; variant <= 3; ++variant) {
    SCOPED_TRACE(variant);
    std::shared_ptr<ir::Graph> g = expansion_then_depthwise(variant);
    passes::FuseBiasActivation{}.apply(*g);
    EXPECT_FALSE(passes::FoldClipIntoDepthwise{}.apply(*g)) << ir::print_graph(*g);
  }
}
}  // namespace
}  // namespace kiln
