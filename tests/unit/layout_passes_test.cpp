// Transpose / Reshape / Squeeze cancellation, Transpose sinking and shape-subgraph folding.
#include <gtest/gtest.h>

#include "graph_builder.hpp"
#include "passes/passes.hpp"

namespace kiln {
namespace {

using testing::expect_rewrite_keeps_results;
using testing::GraphBuilder;
using testing::ops_of;
using Hist = std::map<std::string, size_t>;
using Ints = std::vector<int64_t>;

ir::Value* transpose(GraphBuilder& b, ir::Value* x, Ints perm) {
  return b.op("Transpose", {x}, {{"perm", ir::Attribute(perm)}});
}

TEST(CancelTransposes, InversePairsVanishAndOthersCompose) {
  auto cancel = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 3, 4});
    ir::Value* y = transpose(b, transpose(b, x, {1, 2, 0}), {2, 0, 1});
    b.output(b.op("Relu", {y}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(cancel, passes::CancelTransposes{});
  EXPECT_EQ(ops_of(*g), (Hist{{"Relu", 1}}));

  auto compose = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 3, 4, 5});
    b.output(transpose(b, transpose(b, x, {0, 2, 1, 3}), {0, 1, 3, 2}));
    return b.graph;
  };
  g = expect_rewrite_keeps_results(compose, passes::CancelTransposes{});
  ASSERT_EQ(ops_of(*g), (Hist{{"Transpose", 1}}));
  EXPECT_EQ(std::get<Ints>(g->nodes()[0]->attribute("perm")->storage()), (Ints{0, 2, 3, 1}));
}

TEST(CancelTransposes, SinksThroughElementwiseOpsToMeetItsInverse) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {Dim::symbol("n"), 3, 4});
    ir::Value* t = transpose(b, x, {0, 2, 1});
    ir::Value* e = b.op("Mul", {b.op("Sigmoid", {b.op("Relu", {t})}), b.scalar(3)});
    b.output(transpose(b, e, {0, 2, 1}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::CancelTransposes{}, {{"n", 2}});
  EXPECT_EQ(ops_of(*g), (Hist{{"Mul", 1}, {"Relu", 1}, {"Sigmoid", 1}}));
  EXPECT_EQ(g->outputs()[0]->type().shape->to_string(), g->inputs()[0]->type().shape->to_string());
}

TEST(CancelTransposes, KeepsATransposeWhoseResultIsAlsoReadElsewhere) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {2, 3});
  ir::Value* t = transpose(b, x, {1, 0});
  b.output(transpose(b, b.op("Relu", {t}), {1, 0}));
  b.output(b.op("Neg", {t}));
  EXPECT_FALSE(passes::CancelTransposes{}.apply(*b.graph));
}

TEST(CollapseReshapes, ReshapeOfReshapeReadsTheSource) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 3, 4});
    ir::Value* r = b.op("Reshape", {x, b.ints({6, 4})});
    b.output(b.op("Reshape", {b.op("Flatten", {b.op("Relu", {r})}), b.ints({4, 6})}));
    ir::Value* r2 = b.op("Reshape", {x, b.ints({2, 12})});
    b.output(b.op("Reshape", {r2, b.ints({0, 3, 4})}));  // 0 copies the intermediate's dim
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::CollapseReshapes{});
  EXPECT_EQ(ops_of(*g), (Hist{{"Relu", 1}, {"Reshape", 3}}));
}

TEST(CollapseReshapes, SqueezeUnsqueezePairsCancel) {
  auto build = [](int opset) {
    return [opset] {
      GraphBuilder b(opset);
      ir::Value* x = b.input("x", {2, 1, 3});
      auto axes_op = [&](const char* op, ir::Value* v, Ints axes) {
        if (opset >= 13) return b.op(op, {v, b.ints(axes)});
        return b.op(op, {v}, {{"axes", ir::Attribute(axes)}});
      };
      ir::Value* u = axes_op("Unsqueeze", x, {0, -1});
      b.output(b.op("Relu", {axes_op("Squeeze", u, {-1, 0})}));
      b.output(b.op("Neg", {axes_op("Unsqueeze", axes_op("Squeeze", x, {1}), {1})}));
      return b.graph;
    };
  };
  for (int opset : {11, 13}) {
    auto g = expect_rewrite_keeps_results(build(opset), passes::CollapseReshapes{});
    EXPECT_EQ(ops_of(*g), (Hist{{"Neg", 1}, {"Relu", 1}}));
  }
}

TEST(CollapseReshapes, UnsqueezeOfSqueezeNeedsTheDimToBeKnownOne) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {2, Dim::symbol("maybe_one")});
  b.output(b.op("Unsqueeze", {b.op("Squeeze", {x, b.ints({1})}), b.ints({1})}));
  EXPECT_FALSE(passes::CollapseReshapes{}.apply(*b.graph));
}

// torch's x.view(x.size(0), x.size(1), 12, 4) -> Shape, Gather, Unsqueeze, Concat, Reshape.
// With `source`, the dims are read from another input of those dims.
std::shared_ptr<ir::Graph> view_by_gathered_dims(std::vector<Dim> dims, bool slice,
                                                 std::vector<Dim> source = {}) {
  GraphBuilder b;
  ir::Value* x = b.input("x", dims);
  ir::Value* shape = b.op("Shape", {source.empty() ? x : b.input("y", source)});
  std::vector<ir::Value*> parts;
  if (slice) {
    parts.push_back(b.op("Slice", {shape, b.ints({0}), b.ints({2})}));
  } else {
    for (int64_t axis : {0, 1}) {
      ir::Value* d =
          b.op("Gather", {shape, b.graph->add_initializer(b.graph->unique_name("idx"),
                                                          Tensor::scalar<int64_t>(axis))});
      parts.push_back(b.op("Unsqueeze", {d, b.ints({0})}));
    }
  }
  parts.push_back(b.ints({12, 4}));
  ir::Value* target = b.op("Concat", parts, {{"axis", ir::Attribute(int64_t{0})}});
  b.output(b.op("Reshape", {x, target}));
  return b.graph;
}

TEST(FoldConstants, ShapeChainsOfStaticDimsBecomeConstantsEvenWithSymbolicDims) {
  for (bool slice : {false, true}) {
    SCOPED_TRACE(slice ? "Slice" : "Gather");
    // The trailing dim is symbolic, the gathered ones static.
    auto build = [&] { return view_by_gathered_dims({2, 3, Dim::symbol("hw")}, slice); };
    auto g = expect_rewrite_keeps_results(build, passes::FoldConstants{}, {{"hw", 48}});
    EXPECT_EQ(ops_of(*g), (Hist{{"Reshape", 1}}));
    ASSERT_TRUE(g->nodes()[0]->input(1)->is_constant());
    EXPECT_EQ(g->nodes()[0]->input(1)->constant().to_int64_vector(), (Ints{2, 3, 12, 4}));
  }
}

TEST(FoldConstants, SymbolicDimsOfTheReshapedTensorItselfBecomeCopies) {
  for (bool slice : {false, true}) {
    SCOPED_TRACE(slice ? "Slice" : "Gather");
    auto build = [&] { return view_by_gathered_dims({Dim::symbol("batch"), 3, 48}, slice); };
    auto g = expect_rewrite_keeps_results(build, passes::FoldConstants{}, {{"batch", 2}});
    EXPECT_EQ(ops_of(*g), (Hist{{"Reshape", 1}}));
    ASSERT_TRUE(g->nodes()[0]->input(1)->is_constant());
    EXPECT_EQ(g->nodes()[0]->input(1)->constant().to_int64_vector(),
              (slice ? Ints{0, 0, 12, 4} : Ints{0, 3, 12, 4}));
  }
}

TEST(FoldConstants, SymbolicDimsOfAnotherTensorStay) {
  for (bool slice : {false, true}) {
    auto g =
        view_by_gathered_dims({Dim::symbol("batch"), 3, 48}, slice, {Dim::symbol("other"), 3, 48});
    passes::FoldConstants{}.apply(*g);
    EXPECT_EQ(ops_of(*g).count("Shape"), 1u);
    EXPECT_EQ(ops_of(*g).count("Concat"), 1u);
  }
}

}  // namespace
}  // namespace kiln
