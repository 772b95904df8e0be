// Blocked (nChw16c / nChw8c) activations between CPU kernels against the reference interpreter.
// Each case is a small chain of ops; the test checks that the values it is about really were
// kept blocked (or, at a boundary, row-major) by the executor's layout assignment, so a case
// never silently runs the row-major path, then compares every graph output with the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "backends/cpu/cpu_backend.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/memory_planner.hpp"

namespace kiln {
namespace {

Tensor random_tensor(const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t(DataType::Float32, dims);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.values<float>()) v = dist(rng);
  return t;
}

// Builds a graph node by node; values are referred to by name.
class Chain {
 public:
  explicit Chain(unsigned seed) : rng_(seed), g_(std::make_shared<ir::Graph>()) {
    g_->opsets()[""] = 17;
    g_->opsets()["ai.kiln"] = 1;
  }

  ir::Value* input(const std::string& name, std::vector<int64_t> dims) {
    feeds_.push_back(random_tensor(dims, rng_));
    return g_->add_input(name, TypeInfo::tensor(DataType::Float32, Shape::from_values(dims)));
  }
  ir::Value* weight(std::vector<int64_t> dims, float shift = 0.f) {
    Tensor t = random_tensor(dims, rng_);
    for (float& v : t.values<float>()) v += shift;
    return g_->add_initializer(fmt::format("w{}", count_++), std::move(t));
  }
  ir::Value* node(const std::string& op, std::vector<ir::Value*> in,
                  std::vector<std::pair<std::string, ir::Attribute>> attrs = {},
                  const std::string& domain = "") {
    ir::Value* y = g_->add_value(fmt::format("v{}", count_++));
    ir::Node* n = g_->add_node(op, domain, fmt::format("n{}", count_++), std::move(in), {y});
    n->set_opset(domain.empty() ? 17 : 1);
    for (auto& [k, v] : attrs) n->set_attribute(k, v);
    return y;
  }
  // Conv (or FusedConv with `activation`) from `x` with C input channels to M, kernel k x k.
  ir::Value* conv(ir::Value* x, int64_t c, int64_t m, int64_t k,
                  std::vector<std::pair<std::string, ir::Attribute>> attrs = {}, int64_t group = 1,
                  const std::string& activation = "", std::vector<float> params = {}) {
    attrs.push_back({"group", ir::Attribute(group)});
    if (!activation.empty()) {
      attrs.push_back({"activation", ir::Attribute(activation)});
      if (!params.empty()) attrs.push_back({"activation_params", ir::Attribute(params)});
    }
    return node(activation.empty() ? "Conv" : "FusedConv",
                {x, weight({m, c / group, k, k}), weight({m})}, std::move(attrs),
                activation.empty() ? "" : "ai.kiln");
  }

  // Runs the executor and the interpreter on the same feeds; `check` looks at the executor's
  // layouts before running.
  void compare(std::vector<ir::Value*> outputs,
               const std::function<void(const runtime::Executor&)>& check,
               const engine::ExecutionPlan* stored = nullptr) {
    for (ir::Value* o : outputs) g_->add_output(o);
    passes::InferShapes{}.apply(*g_);
    runtime::Executor ex(g_, {.threads = 1}, stored);
    check(ex);
    std::vector<RtValue> feeds(feeds_.begin(), feeds_.end());
    std::vector<RtValue> fast = ex.run(feeds);
    std::vector<RtValue> again = ex.run(feeds);  // the arena and packed weights reused
    std::vector<RtValue> ref = runtime::Interpreter(g_).run(feeds);
    ASSERT_EQ(fast.size(), ref.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      const Tensor& a = fast[i].tensor();
      const Tensor& r = ref[i].tensor();
      ASSERT_EQ(a.dims(), r.dims()) << "output " << i;
      ASSERT_GT(a.numel(), 0);
      // Chains of convolutions sum many products in another order than the reference: the
      // bound scales with the output's magnitude (a layout bug is off by O(magnitude)).
      double scale = 0;
      for (int64_t k = 0; k < r.numel(); ++k) {
        scale = std::max(scale, std::abs(double(r.data<float>()[k])));
      }
      double worst = 0, worst_diff = 0;
      for (int64_t k = 0; k < a.numel(); ++k) {
        const double va = a.data<float>()[k], vb = r.data<float>()[k];
        worst = std::max(worst, std::abs(va - vb) / (1e-5 * scale + 1e-4 * std::abs(vb)));
        worst_diff = std::max(worst_diff, std::abs(va - vb));
        ASSERT_EQ(va, again[i].tensor().data<float>()[k]) << "second run differs at " << k;
      }
      EXPECT_LE(worst, 1.0) << "output " << i << ": fast and reference differ by " << worst_diff
                            << ", beyond 1e-5 max|ref| + 1e-4 |ref| (max|ref| " << scale << ")";
    }
  }

 private:
  std::mt19937 rng_;
  std::shared_ptr<ir::Graph> g_;
  std::vector<Tensor> feeds_;
  int count_ = 0;
};

using A = std::vector<std::pair<std::string, ir::Attribute>>;
ir::Attribute ints(std::vector<int64_t> v) {
  return ir::Attribute(std::move(v));
}

class BlockedLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    block_ = backends::CpuBackend::instance().activation_layout().block;
    if (block_ == 0) GTEST_SKIP() << "blocked layouts are off (KILN_CPU_BLOCKED=0)";
  }
  int block_ = 0;
};

TEST_F(BlockedLayout, ConvChainFromAndToRowMajor) {
  Chain c(1);
  ir::Value* x = c.input("x", {1, 3, 11, 11});
  ir::Value* a = c.conv(x, 3, 16, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.conv(a, 16, 32, 3, {{"strides", ints({2, 2})}, {"pads", ints({0, 1, 1, 0})}});
  ir::Value* y = c.conv(b, 32, 5, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    EXPECT_EQ(ex.layout_block(a), block_);
    EXPECT_EQ(ex.layout_block(b), block_);
    EXPECT_EQ(ex.layout_block(y), 0) << "graph outputs are row-major";
  });
}

TEST_F(BlockedLayout, OddChannelsArePadded) {
  Chain c(2);
  ir::Value* x = c.input("x", {2, 5, 9, 10});
  ir::Value* a = c.conv(x, 5, 24, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b =
      c.conv(a, 24, 20, 3, {{"dilations", ints({2, 2})}, {"pads", ints({2, 1, 2, 1})}}, 1, "Relu");
  ir::Value* d =
      c.conv(b, 20, 20, 3, {{"pads", ints({1, 1, 1, 1})}}, 1, "HardSigmoid", {0.2f, 0.5f});
  ir::Value* y = c.conv(d, 20, 7, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    EXPECT_EQ(ex.layout_block(a), block_);
    EXPECT_EQ(ex.layout_block(b), block_);
    EXPECT_EQ(ex.layout_block(d), block_);
  });
}

TEST_F(BlockedLayout, GroupedAndDepthwise) {
  Chain c(3);
  ir::Value* x = c.input("x", {1, 8, 12, 12});
  ir::Value* a = c.conv(x, 8, 24, 3, {{"pads", ints({1, 1, 1, 1})}}, 4);
  ir::Value* b = c.conv(a, 24, 24, 3, {{"pads", ints({1, 1, 1, 1})}}, 24, "Clip", {0.f, 6.f});
  ir::Value* d = c.conv(
      b, 24, 24, 5,
      {{"strides", ints({2, 2})}, {"dilations", ints({2, 1})}, {"pads", ints({3, 1, 2, 2})}}, 24);
  ir::Value* e = c.conv(d, 24, 36, 3, {{"strides", ints({2, 1})}}, 3, "Silu");
  ir::Value* y = c.conv(e, 36, 6, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    // The depthwise convolutions stay blocked between them; the grouped ones with 2 and 8
    // channels per group (not whole blocks) read and write row-major, where oneDNN has a fast
    // kernel for them.
    EXPECT_EQ(ex.layout_block(b), block_);
    for (ir::Value* v : {a, d, e}) EXPECT_EQ(ex.layout_block(v), 0) << v->name();
  });
}

TEST_F(BlockedLayout, ConcatBatchNormAndSumOfBlockedTensors) {
  Chain c(9);
  ir::Value* x = c.input("x", {2, 8, 9, 9});
  ir::Value* a = c.conv(x, 8, 32, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.conv(x, 8, 16, 1, {}, 1, "Relu");
  ir::Value* cat = c.node("Concat", {a, b}, {{"axis", ir::Attribute(int64_t{1})}});
  // Variances in [1, 3).
  ir::Value* bn = c.node("BatchNormalization",
                         {cat, c.weight({48}), c.weight({48}), c.weight({48}), c.weight({48}, 2.f)},
                         {{"epsilon", ir::Attribute(1e-3f)}});
  ir::Value* s = c.node("Sum", {bn, cat, bn});
  ir::Value* y = c.conv(s, 48, 8, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, b, cat, bn, s}) EXPECT_EQ(ex.layout_block(v), block_) << v->name();
  });
}

TEST_F(BlockedLayout, GroupsOfWholeBlocksStayBlocked) {
  Chain c(4);
  ir::Value* x = c.input("x", {1, 8, 10, 10});
  ir::Value* a = c.conv(x, 8, 64, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.conv(a, 64, 64, 3, {{"pads", ints({1, 1, 1, 1})}}, 64 / 16, "Relu");
  ir::Value* y = c.conv(b, 64, 8, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, b}) EXPECT_EQ(ex.layout_block(v), block_) << v->name();
  });
}

TEST_F(BlockedLayout, ResidualPoolingAndGlobalPool) {
  Chain c(4);
  ir::Value* x = c.input("x", {1, 3, 16, 16});
  ir::Value* a = c.conv(x, 3, 40, 3, {{"pads", ints({1, 1, 1, 1})}}, 1, "Relu");
  ir::Value* p = c.node(
      "MaxPool", {a},
      {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.conv(p, 40, 40, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* s = c.node("Add", {b, p});
  ir::Value* r = c.node("Relu", {s});
  ir::Value* q = c.node("AveragePool", {r}, {{"kernel_shape", ints({2, 2})}});
  ir::Value* m = c.node("Mul", {q, q});
  ir::Value* d = c.node("Sub", {m, q});
  ir::Value* e = c.conv(d, 40, 24, 1);
  ir::Value* y = c.node("GlobalAveragePool", {e});
  ir::Value* z = c.node("GlobalMaxPool", {r});
  c.compare({y, z}, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, p, b, s, r, q, m, d, e}) {
      EXPECT_EQ(ex.layout_block(v), block_) << v->name();
    }
  });
}

// FusedConv's residual Z (oneDNN's sum post-op) on blocked tensors: Z in the output's layout,
// the result in Z's space where Z dies there, but never when Z is also the convolution's X
// (the output would overwrite input elements the windows still read).
TEST_F(BlockedLayout, ResidualConvolutionsInPlaceOnlyWhereSafe) {
  Chain c(9);
  ir::Value* x = c.input("x", {1, 3, 12, 12});
  ir::Value* a = c.conv(x, 3, 16, 3, {{"pads", ints({1, 1, 1, 1})}});
  const A pad1 = {{"pads", ints({1, 1, 1, 1})}, {"activation", ir::Attribute(std::string("Relu"))}};
  ir::Value* r = c.node("FusedConv", {a, c.weight({16, 16, 3, 3}), c.weight({16}), a}, pad1,
                        "ai.kiln");  // X is Z
  ir::Value* b = c.conv(r, 16, 16, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* s = c.node("FusedConv", {b, c.weight({16, 16, 3, 3}), c.weight({16}), r}, pad1,
                        "ai.kiln");  // Z dies here
  ir::Value* y = c.conv(s, 16, 5, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, r, b, s}) EXPECT_EQ(ex.layout_block(v), block_) << v->name();
    EXPECT_EQ(ex.kernel_choices()[1].kernel, "onednn.conv");
    const runtime::ExecutionPlan& plan = ex.plan();
    auto offset = [&](const ir::Value* v) { return plan.ranges()[plan.value_index(v)].offset; };
    EXPECT_NE(offset(r), offset(a)) << "X is also Z: no space shared";
    EXPECT_EQ(offset(s), offset(r)) << "Z dies at its convolution: the result takes its space";
  });
}

TEST_F(BlockedLayout, BoundariesStayRowMajor) {
  Chain c(5);
  ir::Value* x = c.input("x", {1, 4, 8, 8});
  ir::Value* a = c.conv(x, 4, 16, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.node("Sigmoid", {c.conv(a, 16, 16, 1)});
  // Div would put 0/0 in the padding: row-major, and so are its operands.
  ir::Value* q = c.node("Div", {a, b});
  ir::Value* d = c.conv(q, 16, 16, 1);
  // A broadcast operand that is not per channel: row-major.
  ir::Value* bias = c.weight({1, 1, 1, 8});
  ir::Value* e = c.node("Add", {d, bias});
  // Read by a conv and by the graph's output: row-major.
  ir::Value* f = c.conv(e, 16, 8, 3);
  ir::Value* y = c.conv(f, 8, 8, 1);
  // Read by a kernel without blocked layouts (Flatten is a view).
  ir::Value* g = c.conv(y, 8, 16, 1);
  ir::Value* h = c.node("Flatten", {g});
  c.compare({f, y, h}, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, b, q, d, e, f, y, g}) EXPECT_EQ(ex.layout_block(v), 0) << v->name();
  });
}

// EfficientNet's squeeze-excitation: a per-channel scale of a blocked tensor, either operand
// order, channels padded; Div too (its padding lanes are written as 0).
TEST_F(BlockedLayout, PerChannelScaleOfABlockedTensor) {
  Chain c(7);
  ir::Value* x = c.input("x", {2, 3, 9, 9});
  ir::Value* a = c.conv(x, 3, 20, 3, {{"pads", ints({1, 1, 1, 1})}}, 1, "Silu");
  ir::Value* g = c.node("GlobalAveragePool", {a});
  ir::Value* r = c.conv(g, 20, 8, 1, {}, 1, "Relu");
  ir::Value* s = c.node("Sigmoid", {c.conv(r, 8, 20, 1)});
  ir::Value* m = c.node("Mul", {s, a});
  ir::Value* d = c.conv(m, 20, 20, 3, {{"pads", ints({1, 1, 1, 1})}}, 20);
  ir::Value* q = c.node("Div", {d, s});
  ir::Value* k = c.node("Add", {q, c.weight({20, 1, 1})});
  ir::Value* y = c.conv(k, 20, 6, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, m, d, q, k}) EXPECT_EQ(ex.layout_block(v), block_) << v->name();
    EXPECT_EQ(ex.layout_block(s), 0);
  });
}

// An engine planned without blocked layouts gives a 20-channel value a slot too small for its
// padding: that value stays row-major (and the result right) instead of the open failing.
TEST_F(BlockedLayout, StoredPlanWithRowMajorSlots) {
  Chain c(8);
  ir::Value* x = c.input("x", {1, 3, 6, 6});
  // 20 channels need padding whether the CPU's block is 8 (AVX2) or 16 (AVX-512).
  ir::Value* a = c.conv(x, 3, 20, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.conv(a, 20, 32, 1);
  ir::Value* y = c.conv(b, 32, 4, 1);
  engine::ExecutionPlan plan;
  c.compare({y}, [&](const runtime::Executor& ex) {
    ASSERT_EQ(ex.layout_block(a), block_);
    plan = ex.execution_plan();
  });
  bool shrunk = false;
  for (engine::StoredArena& arena : plan.arenas) {
    for (engine::StoredBuffer& buf : arena.buffers) {
      if (buf.value == a->name()) {
        buf.size = *runtime::max_value_bytes(*a);
        shrunk = true;
      }
    }
  }
  ASSERT_TRUE(shrunk);
  Chain again(8);
  ir::Value* x2 = again.input("x", {1, 3, 6, 6});
  ir::Value* a2 = again.conv(x2, 3, 20, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b2 = again.conv(a2, 20, 32, 1);
  ir::Value* y2 = again.conv(b2, 32, 4, 1);
  again.compare(
      {y2},
      [&](const runtime::Executor& ex) {
        EXPECT_EQ(ex.layout_block(a2), 0);
        EXPECT_EQ(ex.layout_block(b2), block_);
      },
      &plan);
}

TEST_F(BlockedLayout, WeightsAsInputsAreReorderedEachRun) {
  Chain c(6);
  ir::Value* x = c.input("x", {1, 3, 7, 7});
  ir::Value* wt = c.input("w", {16, 16, 3, 3});
  ir::Value* a = c.conv(x, 3, 16, 3, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* b = c.node("Conv", {a, wt}, {{"pads", ints({1, 1, 1, 1})}});
  ir::Value* y = c.conv(b, 16, 4, 1);
  c.compare({y}, [&](const runtime::Executor& ex) {
    EXPECT_EQ(ex.layout_block(a), block_);
    EXPECT_EQ(ex.layout_block(b), block_);
  });
}

}  // namespace
}  // namespace kiln
