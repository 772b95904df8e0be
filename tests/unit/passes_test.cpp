// Graph passes: each test builds a graph, runs one pass, and checks the graph and its results.
#include <gtest/gtest.h>

#include <sstream>

#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"
#include "runtime/interpreter.hpp"

namespace kiln {
namespace {

TypeInfo f32(std::vector<int64_t> dims) {
  return TypeInfo::tensor(DataType::Float32, Shape::from_values(dims));
}

ir::Node* add_node(ir::Graph& g, const std::string& op, std::vector<ir::Value*> in,
                   const std::string& out_name, TypeInfo type = f32({3})) {
  ir::Value* out = g.add_value(out_name, std::move(type));
  ir::Node* n = g.add_node(op, "", "", std::move(in), {out});
  n->set_opset(17);
  return n;
}

std::vector<float> run_graph(std::shared_ptr<ir::Graph> g, std::vector<float> x) {
  runtime::Interpreter interp(g);
  auto out = interp.run(std::vector<RtValue>{Tensor::from_vector<float>({3}, x)});
  auto v = out[0].tensor().values<float>();
  return {v.begin(), v.end()};
}

TEST(Passes, DeadCodeIsRemovedAndOutputsKept) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Value* unused_w = g->add_initializer("w", Tensor::from_vector<float>({3}, {1, 2, 3}));
  ir::Node* dead = add_node(*g, "Add", {x, unused_w}, "dead");
  add_node(*g, "Identity", {dead->output(0)}, "dead2");
  ir::Node* live = add_node(*g, "Add", {x, x}, "y");
  g->add_output(live->output(0));
  EXPECT_TRUE(passes::EliminateDeadCode{}.apply(*g));
  ASSERT_EQ(g->node_count(), 1u);
  EXPECT_EQ(g->nodes()[0], live);
  EXPECT_TRUE(g->initializers().empty());
  EXPECT_FALSE(passes::EliminateDeadCode{}.apply(*g));
  EXPECT_EQ(run_graph(g, {1, 2, 3}), (std::vector<float>{2, 4, 6}));
}

TEST(Passes, IdentityRemovalKeepsTheGraphOutputName) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Node* a = add_node(*g, "Add", {x, x}, "t");
  ir::Node* id = add_node(*g, "Identity", {a->output(0)}, "y");
  g->add_output(id->output(0));
  EXPECT_TRUE(passes::EliminateIdentity{}.apply(*g));
  ASSERT_EQ(g->node_count(), 1u);
  EXPECT_EQ(g->outputs()[0]->name(), "y");
  EXPECT_EQ(g->outputs()[0]->producer()->op_type(), "Add");
  ir::validate_graph(*g);
  EXPECT_EQ(run_graph(g, {1, 2, 3}), (std::vector<float>{2, 4, 6}));
}

TEST(Passes, IdentityFromInputToOutputIsKept) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Node* id = add_node(*g, "Identity", {x}, "y");
  g->add_output(id->output(0));
  EXPECT_FALSE(passes::EliminateIdentity{}.apply(*g));
  EXPECT_EQ(g->node_count(), 1u);
}

TEST(Passes, ConstantsFoldThroughTheReferenceKernels) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Value* a = g->add_initializer("a", Tensor::from_vector<float>({3}, {1, 2, 3}));
  ir::Value* b = g->add_initializer("b", Tensor::from_vector<float>({3}, {10, 20, 30}));
  ir::Node* ab = add_node(*g, "Add", {a, b}, "ab");
  ir::Node* y = add_node(*g, "Mul", {x, ab->output(0)}, "y");
  g->add_output(y->output(0));
  EXPECT_TRUE(passes::FoldConstants{}.apply(*g));
  EXPECT_EQ(g->node_count(), 1u);
  const ir::Value* folded = g->find_value("ab");
  ASSERT_TRUE(folded && folded->is_constant());
  EXPECT_EQ(folded->constant().data<float>()[2], 33.0f);
  EXPECT_EQ(run_graph(g, {1, 1, 2}), (std::vector<float>{11, 22, 66}));
}

TEST(Passes, FoldingSkipsResultsOverTheSizeLimit) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* a = g->add_initializer("a", Tensor(DataType::Float32, {1024}));
  ir::Node* n = add_node(*g, "Add", {a, a}, "y", f32({1024}));
  g->add_output(n->output(0));
  EXPECT_FALSE((passes::FoldConstants{.max_bytes = 1000}.apply(*g)));
  EXPECT_TRUE((passes::FoldConstants{.max_bytes = 4096}.apply(*g)));
}

TEST(Passes, CommonSubexpressionsAndEqualInitializersMerge) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Value* c1 = g->add_initializer("c1", Tensor::from_vector<float>({3}, {1, 1, 1}));
  ir::Value* c2 = g->add_initializer("c2", Tensor::from_vector<float>({3}, {1, 1, 1}));
  ir::Node* p = add_node(*g, "Add", {x, c1}, "p");
  ir::Node* q = add_node(*g, "Add", {x, c2}, "q");
  ir::Node* y = add_node(*g, "Mul", {p->output(0), q->output(0)}, "y");
  g->add_output(y->output(0));
  EXPECT_TRUE(passes::EliminateCommonSubexpressions{}.apply(*g));
  EXPECT_EQ(g->initializers().size(), 1u);
  EXPECT_EQ(g->node_count(), 2u);
  EXPECT_EQ(y->input(0), y->input(1));
  EXPECT_EQ(run_graph(g, {0, 1, 2}), (std::vector<float>{1, 4, 9}));
}

TEST(PassManager, TracesDisablesByNameAndRefusesUnknownNames) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Node* a = add_node(*g, "Add", {x, x}, "t");
  ir::Node* id = add_node(*g, "Identity", {a->output(0)}, "y");
  g->add_output(id->output(0));

  std::ostringstream trace;
  passes::PassManagerOptions options;
  options.trace = &trace;
  options.disabled = {"eliminate_identity"};
  passes::PassManager pm(options);
  passes::add_default_passes(pm);
  auto stats = pm.run(*g);
  EXPECT_EQ(g->node_count(), 2u);  // the Identity survives: its pass is disabled
  EXPECT_NE(trace.str().find("pass fold_constants"), std::string::npos);
  EXPECT_EQ(trace.str().find("pass eliminate_identity"), std::string::npos);

  options.disabled = {"no_such_pass"};
  passes::PassManager bad(options);
  passes::add_default_passes(bad);
  EXPECT_THROW(bad.run(*g), Error);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Passes, BatchNormFoldsIntoConvWithTheSameResults) {
  auto build = [] {
    auto g = std::make_shared<ir::Graph>();
    ir::Value* x = g->add_input("x", f32({1, 2, 4, 4}));
    std::vector<float> w(3 * 2 * 3 * 3);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7) % 11) / 10.0f - 0.5f;
    ir::Value* wv = g->add_initializer("w", Tensor::from_vector<float>({3, 2, 3, 3}, w));
    ir::Value* bv = g->add_initializer("b", Tensor::from_vector<float>({3}, {0.1f, -0.2f, 0.3f}));
    ir::Node* conv = add_node(*g, "Conv", {x, wv, bv}, "c", f32({1, 3, 2, 2}));
    auto param = [&](const char* name, std::vector<float> v) {
      return g->add_initializer(name, Tensor::from_vector<float>({3}, v));
    };
    ir::Node* bn = add_node(
        *g, "BatchNormalization",
        {conv->output(0), param("gamma", {1.5f, 0.5f, 2.0f}), param("beta", {0.0f, 1.0f, -1.0f}),
         param("mean", {0.2f, -0.1f, 0.05f}), param("var", {0.9f, 1.1f, 0.25f})},
        "y", f32({1, 3, 2, 2}));
    g->add_output(bn->output(0));
    return g;
  };
  Tensor x(DataType::Float32, {1, 2, 4, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 2.0f;
  auto reference = build();
  auto before = runtime::Interpreter(reference).run(std::vector<RtValue>{x});
  auto fused = build();
  EXPECT_TRUE(passes::FuseConvBatchNorm{}.apply(*fused));
  EXPECT_TRUE(passes::EliminateDeadCode{}.apply(*fused));  // the old weights and BN params
  ASSERT_EQ(fused->node_count(), 1u);
  EXPECT_EQ(fused->outputs()[0]->name(), "y");
  EXPECT_EQ(fused->initializers().size(), 2u);
  auto after = runtime::Interpreter(fused).run(std::vector<RtValue>{x});
  const Tensor& a = before[0].tensor();
  const Tensor& b = after[0].tensor();
  ASSERT_EQ(a.dims(), b.dims());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-5);
}

}  // namespace
}  // namespace kiln

#include "runtime/memory_planner.hpp"

namespace kiln {
namespace {

TEST(MemoryPlanner, ReusesDeadBuffersAndNeverOverlapsLiveOnes) {
  // x -> a -> b -> c -> d -> y, plus a long-lived side value s read at the end.
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = g->add_input("x", f32({256}));
  ir::Node* s = add_node(*g, "Add", {x, x}, "s", f32({256}));
  ir::Value* prev = x;
  for (const char* name : {"a", "b", "c", "d"})
    prev = add_node(*g, "Add", {prev, prev}, name, f32({256}))->output(0);
  ir::Node* y = add_node(*g, "Add", {prev, s->output(0)}, "y", f32({256}));
  g->add_output(y->output(0));
  runtime::MemoryPlan plan = runtime::plan_memory(*g);
  EXPECT_EQ(plan.buffers.size(), 6u);
  EXPECT_EQ(plan.naive_bytes, 6u * 1024);
  EXPECT_EQ(plan.arena_bytes, 3u * 1024);  // s, plus two alternating chain buffers
  for (const auto& p : plan.buffers) {
    for (const auto& q : plan.buffers) {
      if (&p == &q) continue;
      bool live_together = p.first_step <= q.last_step && q.first_step <= p.last_step;
      bool share_space = p.offset < q.offset + q.bytes && q.offset < p.offset + p.bytes;
      EXPECT_FALSE(live_together && share_space) << p.value->name() << " vs " << q.value->name();
    }
  }
}

TEST(MemoryPlanner, BoundedSymbolicDimsArePlannedForTheirMaximum) {
  auto g = std::make_shared<ir::Graph>();
  TypeInfo bounded =
      TypeInfo::tensor(DataType::Float32, Shape({Dim::symbol("batch", 1, 8), Dim(16)}));
  TypeInfo unbounded = TypeInfo::tensor(DataType::Float32, Shape({Dim::symbol("n"), Dim(16)}));
  ir::Value* x = g->add_input("x", bounded);
  ir::Node* a = add_node(*g, "Add", {x, x}, "a", bounded);
  ir::Node* b = add_node(*g, "Add", {a->output(0), a->output(0)}, "b", unbounded);
  g->add_output(b->output(0));
  runtime::MemoryPlan plan = runtime::plan_memory(*g);
  ASSERT_EQ(plan.buffers.size(), 1u);
  EXPECT_EQ(plan.buffers[0].bytes, 8u * 16 * 4);
  ASSERT_EQ(plan.unplanned.size(), 1u);
  EXPECT_EQ(plan.unplanned[0]->name(), "b");
}

}  // namespace
}  // namespace kiln
