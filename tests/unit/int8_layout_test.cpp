// The CPU's int8 convolutions exchange channels-last tensors (BlockedLayouts::layout): uint8
// between them through QuantizeLinear, and a residual's float32 sum read as the next one's Z.
// The test checks the layouts the executor chose, so the case never silently runs the
// row-major path, then compares the result with the reference interpreter. Inputs, weights and
// scales are small integers and powers of two, so every product and sum is exact and the two
// paths agree bit for bit (rounding ties go to even on both).
#include <gtest/gtest.h>

#include <random>

#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"

namespace kiln {
namespace {

using backends::Layout;

class Int8Graph {
 public:
  Int8Graph() : g_(std::make_shared<ir::Graph>()) {
    g_->opsets()[""] = 17;
    g_->opsets()["ai.kiln"] = 1;
  }

  ir::Value* input(std::vector<int64_t> dims) {
    Tensor t(DataType::Float32, dims);
    std::uniform_int_distribution<int> dist(0, 12);
    for (float& v : t.values<float>()) v = static_cast<float>(dist(rng_));
    feeds_.push_back(std::move(t));
    return g_->add_input("x", TypeInfo::tensor(DataType::Float32, Shape::from_values(dims)));
  }
  ir::Value* scalar(float v) {
    Tensor t(DataType::Float32, {});
    t.values<float>()[0] = v;
    return constant(std::move(t));
  }
  ir::Value* zero_u8() {
    Tensor t(DataType::UInt8, {});
    t.values<uint8_t>()[0] = 0;
    return constant(std::move(t));
  }
  // uint8 = QuantizeLinear(x, scale, 0).
  ir::Value* quantize(ir::Value* x, float scale) {
    return node("QuantizeLinear", {x, scalar(scale), zero_u8()}, "");
  }
  // FusedQLinearConv of uint8 `x` (scale 1) with `m` 3x3 int8 filters in [-2, 2] (per tensor,
  // scale 1), pads 1, Relu; `y_scale` > 0: a uint8 result, else float32 (with residual `z`).
  ir::Value* conv(ir::Value* x, int64_t c, int64_t m, float y_scale, ir::Value* z = nullptr) {
    Tensor w(DataType::Int8, {m, c, 3, 3});
    std::uniform_int_distribution<int> dist(-2, 2);
    for (int8_t& v : w.values<int8_t>()) v = static_cast<int8_t>(dist(rng_));
    Tensor w_zero(DataType::Int8, {});
    w_zero.values<int8_t>()[0] = 0;
    std::vector<ir::Value*> in = {x,           scalar(1.f),
                                  zero_u8(),   constant(std::move(w)),
                                  scalar(1.f), constant(std::move(w_zero))};
    if (y_scale > 0) {
      in.push_back(scalar(y_scale));
      in.push_back(zero_u8());
    } else {
      in.push_back(nullptr);
      in.push_back(nullptr);
    }
    if (z) {
      in.push_back(nullptr);  // no bias
      in.push_back(z);
    }
    ir::Value* y = node("FusedQLinearConv", std::move(in), "ai.kiln");
    ir::Node* n = y->producer();
    n->set_attribute("pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1}));
    n->set_attribute("activation", ir::Attribute(std::string("Relu")));
    return y;
  }

  ir::Value* op(const std::string& type, std::vector<ir::Value*> in,
                std::vector<std::pair<std::string, ir::Attribute>> attrs = {}) {
    ir::Value* y = node(type, std::move(in), "");
    for (auto& [k, v] : attrs) y->producer()->set_attribute(k, v);
    return y;
  }

  Layout layout(const runtime::Executor& ex, const ir::Value* v) const {
    return ex.plan().layouts()[ex.plan().value_index(v)];
  }

  void compare(ir::Value* output, const std::function<void(const runtime::Executor&)>& check) {
    g_->add_output(output);
    passes::InferShapes{}.apply(*g_);
    runtime::Executor ex(g_, {.threads = 1});
    check(ex);
    std::vector<RtValue> feeds(feeds_.begin(), feeds_.end());
    const Tensor fast = ex.run(feeds)[0].tensor();
    const Tensor again = ex.run(feeds)[0].tensor();
    const Tensor ref = runtime::Interpreter(g_).run(feeds)[0].tensor();
    ASSERT_EQ(fast.dims(), ref.dims());
    ASSERT_EQ(fast.dtype(), DataType::Float32);
    double largest = 0;
    for (int64_t k = 0; k < ref.numel(); ++k) {
      ASSERT_EQ(fast.data<float>()[k], ref.data<float>()[k]) << "at " << k;
      ASSERT_EQ(again.data<float>()[k], ref.data<float>()[k]) << "second run, at " << k;
      largest = std::max(largest, double(ref.data<float>()[k]));
    }
    EXPECT_GT(largest, 0) << "a result of zeros checks nothing";
  }

 private:
  ir::Value* constant(Tensor t) {
    return g_->add_initializer(fmt::format("c{}", count_++), std::move(t));
  }
  ir::Value* node(const std::string& op, std::vector<ir::Value*> in, const std::string& domain) {
    ir::Value* y = g_->add_value(fmt::format("v{}", count_++));
    ir::Node* n = g_->add_node(op, domain, fmt::format("n{}", count_++), std::move(in), {y});
    n->set_opset(domain.empty() ? 17 : 1);
    return y;
  }

  std::mt19937 rng_{7};
  std::shared_ptr<ir::Graph> g_;
  std::vector<Tensor> feeds_;
  int count_ = 0;
};

TEST(Int8Layout, ChannelsLastBetweenInt8Convolutions) {
  Int8Graph g;
  ir::Value* x = g.input({2, 16, 7, 6});
  ir::Value* q = g.quantize(x, 1.f);         // of a graph input: row-major
  ir::Value* a = g.conv(q, 16, 32, 0.f);     // float32 out
  ir::Value* qa = g.quantize(a, 16.f);       // uint8 of a's channels-last
  ir::Value* b = g.conv(qa, 32, 32, 8.f);    // uint8 out
  ir::Value* r = g.conv(b, 32, 32, 0.f, a);  // float32, residual a (dies here)
  ir::Value* qr = g.quantize(r, 32.f);       //
  ir::Value* y = g.conv(qr, 32, 8, 0.f);     // the graph output: row-major
  g.compare(y, [&](const runtime::Executor& ex) {
    EXPECT_TRUE(g.layout(ex, q).is_row_major()) << "the quantized graph input";
    for (ir::Value* v : {a, qa, b, r, qr}) {
      EXPECT_EQ(g.layout(ex, v), Layout::channels_last()) << v->name();
    }
    EXPECT_TRUE(g.layout(ex, y).is_row_major()) << "graph outputs are row-major";
    const runtime::ExecutionPlan& plan = ex.plan();
    auto offset = [&](const ir::Value* v) { return plan.ranges()[plan.value_index(v)].offset; };
    EXPECT_EQ(offset(r), offset(a)) << "the residual dies at its convolution: shared space";
  });
}

TEST(Int8Layout, PoolingTakesTheInt8Layout) {
  // A static QDQ ResNet's stem: an int8 convolution's float32 result, MaxPool, QuantizeLinear.
  Int8Graph g;
  ir::Value* x = g.input({1, 16, 10, 10});
  ir::Value* a = g.conv(g.quantize(x, 1.f), 16, 16, 0.f);
  ir::Value* p = g.op("MaxPool", {a},
                      {{"kernel_shape", ir::Attribute(std::vector<int64_t>{3, 3})},
                       {"strides", ir::Attribute(std::vector<int64_t>{2, 2})},
                       {"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
  ir::Value* qp = g.quantize(p, 8.f);
  ir::Value* y = g.conv(qp, 16, 8, 0.f);
  g.compare(y, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, p, qp}) {
      EXPECT_EQ(g.layout(ex, v), Layout::channels_last()) << v->name();
    }
  });
}

TEST(Int8Layout, ConcatJoinsUint8BranchesChannelsLast) {
  // An Inception-style block after fuse_quantized_ops: two int8 convolutions writing uint8,
  // joined along the channels, read by a third: the Concat joins them channels-last.
  Int8Graph g;
  ir::Value* q = g.quantize(g.input({2, 16, 6, 5}), 1.f);
  ir::Value* a = g.conv(q, 16, 16, 8.f);
  ir::Value* b = g.conv(q, 16, 32, 8.f);
  ir::Value* joined = g.op("Concat", {a, b}, {{"axis", ir::Attribute(int64_t{1})}});
  ir::Value* y = g.conv(joined, 48, 8, 0.f);
  g.compare(y, [&](const runtime::Executor& ex) {
    for (ir::Value* v : {a, b, joined}) {
      EXPECT_EQ(g.layout(ex, v), Layout::channels_last()) << v->name();
    }
  });
}

TEST(Int8Layout, RowMajorUint8MaxPoolRunsThroughChannelsLastCopies) {
  // A pooling of a row-major uint8 tensor (a QuantizeLinear of a graph input): oneDNN pools
  // 8-bit tensors fast only channels-last, so the kernel pools copies in that layout; the
  // result is the reference's exactly.
  Int8Graph g;
  ir::Value* q = g.quantize(g.input({2, 8, 9, 7}), 0.5f);
  ir::Value* p = g.op("MaxPool", {q},
                      {{"kernel_shape", ir::Attribute(std::vector<int64_t>{3, 3})},
                       {"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
  ir::Value* y = g.conv(p, 8, 4, 0.f);
  g.compare(y, [&](const runtime::Executor& ex) {
    EXPECT_TRUE(g.layout(ex, p).is_row_major());
    EXPECT_EQ(ex.kernel_choices()[1].kernel, "onednn.pool");
  });
}

TEST(Int8Layout, GlobalPoolingReadsTheLastConvolutionChannelsLast) {
  // A static QDQ ResNet's end: the last int8 convolution writes float32 with its residual (the
  // block before, dequantized), and GlobalAveragePool / GlobalMaxPool reduce it. They read it
  // channels-last, so the residual chain stays channels-last too (row-major there had every
  // uint8 tensor of ResNet-50's last stage reordered: 9 reorders a run).
  for (const char* pool : {"GlobalAveragePool", "GlobalMaxPool"}) {
    Int8Graph g;
    ir::Value* q = g.quantize(g.input({2, 16, 5, 4}), 1.f);
    ir::Value* a = g.conv(q, 16, 32, 8.f);  // uint8
    ir::Value* b = g.conv(a, 32, 32, 8.f);  // uint8
    ir::Value* da = g.op("DequantizeLinear", {a, g.scalar(8.f), g.zero_u8()});
    ir::Value* r = g.conv(b, 32, 32, 0.f, da);  // float32 with the residual
    ir::Value* y = g.op(pool, {r});
    g.compare(y, [&](const runtime::Executor& ex) {
      for (ir::Value* v : {a, b, da, r}) {
        EXPECT_EQ(g.layout(ex, v), Layout::channels_last()) << pool << " " << v->name();
      }
      EXPECT_EQ(ex.kernel_choices().back().kernel, "cpu.global_pool") << pool;
    });
  }
}

TEST(Int8Layout, AFloatKernelBesideKeepsRowMajor) {
  // The float32 result also read by Relu (the CPU's element-wise kernels take their backend's
  // channel-blocked layout only): no layout suits every reader, so it is row-major, and so is
  // its quantized copy (uint8 is never channel-blocked).
  Int8Graph g;
  ir::Value* x = g.input({1, 16, 8, 8});
  ir::Value* a = g.conv(g.quantize(x, 1.f), 16, 16, 0.f);
  ir::Value* r = g.op("Relu", {a});
  ir::Value* qa = g.quantize(a, 8.f);
  ir::Value* b = g.conv(qa, 16, 16, 0.f);
  ir::Value* y = g.op("Add", {b, r});
  g.compare(y, [&](const runtime::Executor& ex) {
    EXPECT_TRUE(g.layout(ex, a).is_row_major());
    EXPECT_TRUE(g.layout(ex, qa).is_row_major());
    EXPECT_EQ(ex.kernel_choices()[1].kernel, "onednn.qlinear_conv");
  });
}

}  // namespace
}  // namespace kiln
