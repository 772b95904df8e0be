// Transformer fusions: LayerNorm, Gelu (erf and tanh forms), SkipLayerNorm and attention, each
// built as exporters write it, rewritten, and checked to compute the same outputs.
#include <gtest/gtest.h>
#include <limits>

#include "graph_builder.hpp"
#include "ops/fused_activation.hpp"
#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"
#include "transformer_patterns.hpp"

namespace kiln {
namespace {

using testing::expect_rewrite_keeps_results;
using testing::GraphBuilder;
using testing::ops_of;
using Hist = std::map<std::string, size_t>;

const std::map<std::string, int64_t> kDims = {{"batch", 2}, {"seq", 3}};

std::vector<Dim> bsh(int64_t hidden) {
  return {Dim::symbol("batch"), Dim::symbol("seq"), hidden};
}

TEST(FuseLayerNorm, EveryTorchFormBecomesOneNode) {
  struct Case {
    int opset;
    testing::LayerNormForm form;
    const char* op;
  };
  for (const Case& c : std::vector<Case>{
           {13, {}, "ai.kiln.LayerNormalization"},
           {13, {.pow = false}, "ai.kiln.LayerNormalization"},
           {13, {.beta = false}, "ai.kiln.LayerNormalization"},
           {13, {.gamma = false, .beta = false}, "ai.kiln.LayerNormalization"},
           {17, {}, "LayerNormalization"},
           {18, {.axes_input = true}, "LayerNormalization"},
       }) {
    SCOPED_TRACE(::testing::Message() << "opset " << c.opset << " pow " << c.form.pow << " gamma "
                                      << c.form.gamma << " beta " << c.form.beta);
    auto build = [&] {
      GraphBuilder b(c.opset);
      b.output(testing::decomposed_layer_norm(b, b.input("x", bsh(8)), 8, c.form));
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FuseLayerNorm{}, kDims);
    EXPECT_EQ(ops_of(*g), (Hist{{c.op, 1}}));
    const ir::Node* ln = g->nodes()[0];
    EXPECT_EQ(std::get<int64_t>(ln->attribute("axis")->storage()), -1);
    EXPECT_FLOAT_EQ(std::get<float>(ln->attribute("epsilon")->storage()), 1e-5f);
    EXPECT_EQ(ln->opset(), c.opset >= 17 ? c.opset : 1);
  }
}

TEST(FuseLayerNorm, NotOverLeadingAxesNorWithSharedIntermediates) {
  {  // Mean over axis 1 of [batch, seq, hidden] is not a layer norm over trailing dims.
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 3, 4});
    ir::Value* mean = b.op("ReduceMean", {x}, {{"axes", ir::Attribute(std::vector<int64_t>{1})}});
    ir::Value* d = b.op("Sub", {x, mean});
    ir::Value* var = b.op("ReduceMean", {b.op("Pow", {d, b.scalar(2)})},
                          {{"axes", ir::Attribute(std::vector<int64_t>{1})}});
    b.output(b.op("Div", {d, b.op("Sqrt", {b.op("Add", {var, b.scalar(1e-5f)})})}));
    EXPECT_FALSE(passes::FuseLayerNorm{}.apply(*b.graph));
  }
  {  // The centred value d is also a graph output.
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 4});
    ir::Value* y = testing::decomposed_layer_norm(b, x, 4);
    b.output(y);
    ir::Node* sub = nullptr;
    for (ir::Node* n : b.graph->nodes()) {
      if (n->op_type() == "Sub") sub = n;
    }
    b.output(sub->output(0));
    EXPECT_FALSE(passes::FuseLayerNorm{}.apply(*b.graph));
  }
}

TEST(FuseGelu, ErfFormsInEveryOrder) {
  for (int opset : {13, 20}) {
    for (int order = 0; order < 3; ++order) {
      SCOPED_TRACE(::testing::Message() << "opset " << opset << " order " << order);
      auto build = [&] {
        GraphBuilder b(opset);
        b.output(testing::erf_gelu(b, b.input("x", bsh(6)), order));
        return b.graph;
      };
      auto g = expect_rewrite_keeps_results(build, passes::FuseGelu{}, kDims);
      EXPECT_EQ(ops_of(*g), (Hist{{opset >= 20 ? "Gelu" : "ai.kiln.Gelu", 1}}));
      EXPECT_EQ(g->nodes()[0]->attribute("approximate"), nullptr);
    }
  }
}

TEST(FuseGelu, TanhFormWithPowOrProducts) {
  for (bool pow : {true, false}) {
    auto build = [&] {
      GraphBuilder b;
      b.output(testing::tanh_gelu(b, b.input("x", bsh(6)), pow));
      return b.graph;
    };
    auto g = expect_rewrite_keeps_results(build, passes::FuseGelu{}, kDims);
    EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.Gelu", 1}}));
    EXPECT_EQ(std::get<std::string>(g->nodes()[0]->attribute("approximate")->storage()), "tanh");
  }
}

TEST(FuseGelu, WrongConstantsAreLeftAlone) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {4});
  ir::Value* gate = b.op("Add", {b.op("Erf", {b.op("Div", {x, b.scalar(2.0f)})}), b.scalar(1)});
  b.output(b.op("Mul", {b.op("Mul", {x, gate}), b.scalar(0.5f)}));
  EXPECT_FALSE(passes::FuseGelu{}.apply(*b.graph));
}

TEST(FuseSkipLayerNorm, ResidualAddWithAndWithoutBias) {
  for (bool bias : {false, true}) {
    for (bool sum_read : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "bias " << bias << " sum read " << sum_read);
      auto build = [&] {
        GraphBuilder b(17);
        ir::Value* x = b.input("x", bsh(8));
        ir::Value* skip = b.input("skip", bsh(8));
        ir::Value* h = bias ? b.op("Add", {x, b.random({8})}) : x;
        ir::Value* sum = b.op("Add", {skip, h});
        b.output(b.op("LayerNormalization", {sum, b.random({8}), b.random({8})},
                      {{"epsilon", ir::Attribute(1e-3f)}}));
        if (sum_read) b.output(b.op("Relu", {sum}));
        return b.graph;
      };
      auto g = expect_rewrite_keeps_results(build, passes::FuseSkipLayerNorm{}, kDims);
      Hist want = {{"ai.kiln.SkipLayerNormalization", 1}};
      if (sum_read) want["Relu"] = 1;
      EXPECT_EQ(ops_of(*g), want);
      const ir::Node* n = g->nodes()[0];
      EXPECT_EQ(n->inputs().size(), bias ? 5u : 4u);
      EXPECT_EQ(n->outputs().size(), sum_read ? 4u : 1u);
    }
  }
}

TEST(FuseSkipLayerNorm, DecomposedLayerNormThroughTheDefaultPipeline) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* sum = b.op("Add", {b.input("x", bsh(8)), b.input("skip", bsh(8))});
    b.output(testing::decomposed_layer_norm(b, sum, 8));
    return b.graph;
  };
  passes::PassManager pm;
  passes::add_default_passes(pm);
  struct Pipeline {
    passes::PassManager* pm;
    std::string_view name() const { return "default"; }
    bool apply(ir::Graph& g) const {
      pm->run(g);
      return true;
    }
  };
  auto g = expect_rewrite_keeps_results(build, Pipeline{&pm}, kDims);
  EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.SkipLayerNormalization", 1}}));
}

TEST(FuseSkipLayerNorm, DifferentShapesAreNotASkip) {
  GraphBuilder b(17);
  ir::Value* sum = b.op("Add", {b.input("x", {2, 3, 8}), b.input("row", {8})});
  b.output(b.op("LayerNormalization", {sum, b.random({8})}));
  EXPECT_FALSE(passes::FuseSkipLayerNorm{}.apply(*b.graph));
}

TEST(FuseAttention, BertStyleWithMask) {
  auto build = [] {
    GraphBuilder b;
    std::vector<Dim> heads = {Dim::symbol("batch"), 2, Dim::symbol("seq"), 4};
    ir::Value* q = b.input("q", heads);
    ir::Value* k = b.input("k", heads);
    ir::Value* v = b.input("v", heads);
    ir::Value* mask = b.input("mask", {Dim::symbol("batch"), 1, 1, Dim::symbol("seq")});
    ir::Value* kt =
        b.op("Transpose", {k}, {{"perm", ir::Attribute(std::vector<int64_t>{0, 1, 3, 2})}});
    b.output(testing::attention_core(b, q, kt, v, mask, 4));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FuseAttention{}, kDims);
  EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.ScaledDotProductAttention", 1}}));
  const ir::Node* n = g->nodes()[0];
  EXPECT_EQ(n->inputs().size(), 4u);
  EXPECT_FLOAT_EQ(std::get<float>(n->attribute("scale")->storage()), 0.5f);
}

TEST(FuseAttention, KeysTransposedFromTokensMajorAndScaledByMul) {
  // K^T = Transpose(k [batch, seq, heads, d], perm 0 2 3 1): K = Transpose(k, 0 2 1 3).
  auto build = [] {
    GraphBuilder b(11);
    ir::Value* q = b.input("q", {2, 2, 3, 4});
    ir::Value* k = b.input("k", {2, 3, 2, 4});
    ir::Value* v = b.input("v", {2, 2, 3, 5});
    ir::Value* kt =
        b.op("Transpose", {k}, {{"perm", ir::Attribute(std::vector<int64_t>{0, 2, 3, 1})}});
    ir::Value* qs = b.op("Mul", {q, b.scalar(0.5f)});
    ir::Value* s = b.op("Mul", {b.scalar(0.25f), b.op("MatMul", {qs, kt})});
    ir::Value* p = b.op("Softmax", {s}, {{"axis", ir::Attribute(int64_t{3})}});
    b.output(b.op("MatMul", {p, v}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FuseAttention{});
  EXPECT_EQ(ops_of(*g), (Hist{{"Transpose", 1}, {"ai.kiln.ScaledDotProductAttention", 1}}));
  for (const ir::Node* n : g->nodes()) {
    if (n->op_type() == "Transpose") {
      EXPECT_EQ(std::get<std::vector<int64_t>>(n->attribute("perm")->storage()),
                (std::vector<int64_t>{0, 2, 1, 3}));
    } else {
      EXPECT_FLOAT_EQ(std::get<float>(n->attribute("scale")->storage()), 0.125f);
    }
  }
}

// torch.onnx's scaled_dot_product_attention: sqrt(scale) on Q and on K^T, the mask added,
// and Where(IsNaN(P), 0, P) after the Softmax. The second batch's mask is -inf everywhere: its
// rows come out 0 (not NaN) before and after the rewrite (zero_nan_probs).
TEST(FuseAttention, TorchExportScalesBothSidesAndZeroesNanProbabilities) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* q = b.input("q", {2, 2, 3, 4});
    ir::Value* k = b.input("k", {2, 2, 3, 4});
    ir::Value* v = b.input("v", {2, 2, 3, 5});
    const float inf = std::numeric_limits<float>::infinity();
    ir::Value* mask = b.graph->add_initializer(
        "mask", Tensor::from_vector<float>({2, 1, 1, 3}, {0.f, -inf, 0.f, -inf, -inf, -inf}));
    ir::Value* kt =
        b.op("Transpose", {k}, {{"perm", ir::Attribute(std::vector<int64_t>{0, 1, 3, 2})}});
    ir::Value* qs = b.op("Mul", {q, b.scalar(0.5f)});
    ir::Value* ks = b.op("Mul", {kt, b.scalar(0.5f)});
    ir::Value* s = b.op("Add", {b.op("MatMul", {qs, ks}), mask});
    ir::Value* p = b.op("Softmax", {s}, {{"axis", ir::Attribute(int64_t{-1})}});
    ir::Value* safe = b.op("Where", {b.op("IsNaN", {p}), b.scalar(0.f), p});
    b.output(b.op("MatMul", {safe, v}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FuseAttention{});
  EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.ScaledDotProductAttention", 1}}));
  const ir::Node* n = g->nodes()[0];
  EXPECT_FLOAT_EQ(std::get<float>(n->attribute("scale")->storage()), 0.25f);
  EXPECT_EQ(std::get<int64_t>(n->attribute("zero_nan_probs")->storage()), 1);
  // The GPU's pipeline fuses the guarded form only in float16 (FuseAttention's comment): this
  // float32 graph stays as it is, unless the float16 conversion follows the passes.
  using NanGuard = passes::FuseAttention::NanGuard;
  EXPECT_FALSE(passes::FuseAttention{.nan_guard = NanGuard::None}.apply(*build()));
  EXPECT_FALSE(passes::FuseAttention{.nan_guard = NanGuard::Float16}.apply(*build()));
  for (bool float16_follows : {false, true}) {
    auto gpu = build();
    passes::PassManager pm;
    passes::add_default_passes(pm, "gpu", float16_follows);
    pm.run(*gpu);
    EXPECT_EQ(ops_of(*gpu).count("ai.kiln.ScaledDotProductAttention"), float16_follows ? 1u : 0u);
  }
  // The second batch (every key masked) gives 0 through the fused op as through the Where.
  std::vector<RtValue> feeds = testing::random_feeds(*g, 3);
  std::vector<RtValue> out = testing::run_graph(g, feeds);
  const Tensor& y = out[0].tensor();
  for (int64_t i = y.numel() / 2; i < y.numel(); ++i) EXPECT_EQ(y.double_at(i), 0.0) << i;
}

// BERT's head split and merge: Q, K, V [B, S, N, H] transposed to [B, N, S, H] (K to K^T) and
// the output back. Fused, then folded (the GPU's device pass): one op with bsnh = 1 reading the
// projections in place, same results through the reference kernel.
TEST(FoldAttentionTransposes, HeadSplitAndMergeBecomeBsnh) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* q = b.input("q", {2, 5, 3, 4});
    ir::Value* k = b.input("k", {2, 5, 3, 4});
    ir::Value* v = b.input("v", {2, 5, 3, 6});
    auto perm = [](std::vector<int64_t> p) { return ir::Attribute(std::move(p)); };
    ir::Value* qt = b.op("Transpose", {q}, {{"perm", perm({0, 2, 1, 3})}});
    ir::Value* kt = b.op("Transpose", {k}, {{"perm", perm({0, 2, 3, 1})}});
    ir::Value* vt = b.op("Transpose", {v}, {{"perm", perm({0, 2, 1, 3})}});
    ir::Value* s = b.op("Mul", {b.op("MatMul", {qt, kt}), b.scalar(0.5f)});
    ir::Value* p = b.op("Softmax", {s}, {{"axis", ir::Attribute(int64_t{-1})}});
    ir::Value* o = b.op("MatMul", {p, vt});
    b.output(b.op("Transpose", {o}, {{"perm", perm({0, 2, 1, 3})}}));
    return b.graph;
  };
  struct FuseThenFold {
    std::string_view name() const { return "fuse_then_fold"; }
    bool apply(ir::Graph& g) const {
      passes::FuseAttention{}.apply(g);
      return passes::FoldAttentionTransposes{}.apply(g);
    }
  };
  auto g = expect_rewrite_keeps_results(build, FuseThenFold{});
  EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.ScaledDotProductAttention", 1}}));
  EXPECT_EQ(std::get<int64_t>(g->nodes()[0]->attribute("bsnh")->storage()), 1);
  // A Transpose that another node also reads stays, and so does the plain op.
  auto shared = build();
  passes::FuseAttention{}.apply(*shared);
  shared->add_output(shared->nodes()[0]->output(0));
  EXPECT_FALSE(passes::FoldAttentionTransposes{}.apply(*shared));
}

// The probabilities read elsewhere too: the Where stays, and so does the attention's MatMul.
TEST(FuseAttention, NanGuardOfSharedProbabilitiesIsNotFused) {
  GraphBuilder b;
  ir::Value* q = b.input("q", {2, 3, 4});
  ir::Value* kt = b.input("kt", {2, 4, 3});
  ir::Value* p = b.op("Softmax", {b.op("MatMul", {q, kt})});
  b.output(p);
  ir::Value* safe = b.op("Where", {b.op("IsNaN", {p}), b.scalar(0.f), p});
  b.output(b.op("MatMul", {safe, b.input("v", {2, 3, 4})}));
  EXPECT_FALSE(passes::FuseAttention{}.apply(*b.graph));
}

TEST(FuseAttention, SoftmaxOverAnotherAxisIsNotAttention) {
  GraphBuilder b;
  ir::Value* q = b.input("q", {2, 3, 4});
  ir::Value* kt = b.input("kt", {2, 4, 3});
  ir::Value* s = b.op("MatMul", {q, kt});
  ir::Value* p = b.op("Softmax", {s}, {{"axis", ir::Attribute(int64_t{1})}});
  b.output(b.op("MatMul", {p, b.input("v", {2, 3, 4})}));
  EXPECT_FALSE(passes::FuseAttention{}.apply(*b.graph));
}

}  // namespace
}  // namespace kiln
