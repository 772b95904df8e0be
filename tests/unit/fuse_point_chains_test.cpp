// passes/fuse_point_chains: element-wise ops in a row become one ai.kiln PointChain whose
// reference results equal the unfused graph's (a per-channel bias, an operand on the left of a
// Sub, x * x, Clip's constant bounds, a shared operand counted once), and what must stay apart
// does (a value read twice, an operand that would grow the shape, a lone op, too many operands).
#include <gtest/gtest.h>

#include "graph_builder.hpp"
#include "ops/point_chain_nodes.hpp"
#include "passes/passes.hpp"

namespace kiln {
namespace {

using testing::expect_rewrite_keeps_results;
using testing::GraphBuilder;
using testing::ops_of;
using Hist = std::map<std::string, size_t>;

TEST(FusePointChains, ChainOfUnaryAndBroadcastBinaryOpsBecomesOneNode) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {2, 3, 4, 5});
    ir::Value* bias = b.random({3, 1, 1});
    ir::Value* v = b.op("Add", {x, bias});
    v = b.op("Relu", {v});
    v = b.op("Mul", {v, v});              // the running value twice
    v = b.op("Sub", {b.scalar(1.f), v});  // the running value second
    v = b.op("Clip", {v, b.scalar(-0.5f), b.scalar(0.75f)});
    v = b.op("Mul", {v, bias});  // an operand already in the chain
    v = b.op("LeakyRelu", {v}, {{"alpha", ir::Attribute(0.2f)}});
    b.output(v);
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FusePointChains{});
  ASSERT_EQ(ops_of(*g), (Hist{{"ai.kiln.PointChain", 1}})) << ir::print_graph(*g);
  const ir::Node* chain = g->nodes().front();
  EXPECT_EQ(chain->inputs().size(), 3u);  // x, the bias, the 1
  EXPECT_EQ(std::get<std::vector<std::string>>(chain->attribute("ops")->storage()).size(), 7u);
}

TEST(FusePointChains, ChainStartsAtABinaryOpOnItsFullShapeOperand) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* x = b.input("x", {4, 6});
    ir::Value* v = b.op("Div", {b.random({6}, 0.5f, 2.f), x});  // x on the right
    b.output(b.op("Tanh", {b.op("Exp", {v})}));
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FusePointChains{});
  EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.PointChain", 1}})) << ir::print_graph(*g);
}

TEST(FusePointChains, LeavesWhatCannotJoin) {
  {
    // The middle value is read twice: the chain stops before its second reader.
    GraphBuilder b;
    ir::Value* v = b.op("Relu", {b.input("x", {3, 4})});
    b.output(b.op("Sigmoid", {v}));
    b.output(v);
    EXPECT_FALSE(passes::FusePointChains{}.apply(*b.graph)) << ir::print_graph(*b.graph);
  }
  {
    // The operand would grow the shape ([3, 1] + [1, 4] -> [3, 4]).
    GraphBuilder b;
    ir::Value* v = b.op("Relu", {b.input("x", {3, 1})});
    b.output(b.op("Add", {v, b.input("y", {1, 4})}));
    EXPECT_FALSE(passes::FusePointChains{}.apply(*b.graph)) << ir::print_graph(*b.graph);
  }
  {
    // One op alone.
    GraphBuilder b;
    b.output(b.op("Relu", {b.input("x", {3, 4})}));
    EXPECT_FALSE(passes::FusePointChains{}.apply(*b.graph));
  }
}

TEST(FusePointChains, AFourthOperandEndsTheChain) {
  auto build = [] {
    GraphBuilder b;
    ir::Value* v = b.input("x", {2, 8});
    for (int k = 0; k < 4; ++k) v = b.op("Add", {v, b.random({8})});
    b.output(v);
    return b.graph;
  };
  auto g = expect_rewrite_keeps_results(build, passes::FusePointChains{});
  // Three operands in the first chain; the fourth Add is left on its own.
  EXPECT_EQ(ops_of(*g), (Hist{{"ai.kiln.PointChain", 1}, {"Add", 1}})) << ir::print_graph(*g);
}

// --fp16 after the fusion: a chain converts when each op in it would (Relu, Add), and stays
// float32 when one would not (Exp), as the unfused ops did.
TEST(FusePointChains, Float16ConversionFollowsTheOpsInTheChain) {
  for (const char* unary : {"Relu", "Exp"}) {
    SCOPED_TRACE(unary);
    GraphBuilder b;
    ir::Value* v = b.op(unary, {b.input("x", {3, 4})});
    b.output(b.op("Add", {v, b.random({4})}));
    ASSERT_TRUE(passes::FusePointChains{}.apply(*b.graph));
    ASSERT_TRUE(passes::ConvertToFloat16{}.apply(*b.graph) || std::string(unary) == "Exp");
    const ir::Node* chain = nullptr;
    for (const ir::Node* n : b.graph->nodes()) {
      if (n->op_type() == "PointChain") chain = n;
    }
    ASSERT_NE(chain, nullptr);
    EXPECT_EQ(chain->input(0)->type().dtype,
              std::string(unary) == "Relu" ? DataType::Float16 : DataType::Float32);
  }
}

// A malformed chain (an engine's bytes) is refused when read: an operand past the node's inputs
// would have the GPU kernel read a slot the node does not have.
TEST(FusePointChains, ReadingRefusesAnOperandPastTheInputs) {
  GraphBuilder b;
  b.output(b.op("Relu", {b.op("Add", {b.input("x", {3, 4}), b.random({4})})}));
  ASSERT_TRUE(passes::FusePointChains{}.apply(*b.graph));
  ir::Node* chain = b.graph->nodes().front();
  ASSERT_EQ(chain->inputs().size(), 2u);
  EXPECT_NO_THROW(ops::read_point_chain(ops::AttrReader(*chain)));
  chain->set_attribute("operands", ir::Attribute(std::vector<int64_t>{2, 0}));
  EXPECT_THROW(ops::read_point_chain(ops::AttrReader(*chain)), Error);
}

}  // namespace
}  // namespace kiln
