// Static INT8 graphs in a half-precision engine (`kiln compile --bf16` / `--fp16` of a QDQ
// model): an int8 product's float result is written in bfloat16 by the product itself
// (FusedQLinearMatMul's output_dtype), and a QuantizeLinear reads the half type it is handed,
// so no Cast sits between them; a QuantizeLinear fed float32 keeps float32 (no Cast is added
// before it). The engine then agrees with the float32 reference within the quantization step.
#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/onednn_common.hpp"
#include "graph_builder.hpp"
#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"

namespace kiln {
namespace {

using testing::GraphBuilder;

class Int8Graph {
 public:
  Int8Graph() : b_(17) {}

  ir::Value* input(int64_t rows, int64_t k) { return b_.input("x", {Dim(1), Dim(rows), Dim(k)}); }
  ir::Value* quantize(ir::Value* x, float scale, uint8_t zero) {
    return b_.op("QuantizeLinear", {x, b_.scalar(scale), u8(zero)});
  }
  ir::Value* dequantize(ir::Value* q, float scale, uint8_t zero) {
    return b_.op("DequantizeLinear", {q, b_.scalar(scale), u8(zero)});
  }
  // FusedQLinearMatMul of uint8 `a` (scale a_scale, zero 128) with a [k, n] int8 weight (per
  // column scales) and a float bias; y_scale > 0 gives a uint8 result (zero 128), else float.
  ir::Value* product(ir::Value* a, float a_scale, int64_t k, int64_t n, float y_scale,
                     const char* activation = nullptr) {
    Tensor w(DataType::Int8, {k, n});
    std::uniform_int_distribution<int> dist(-100, 100);
    for (int8_t& v : w.values<int8_t>()) v = static_cast<int8_t>(dist(rng_));
    Tensor w_zero(DataType::Int8, {n});
    std::vector<float> w_scale(static_cast<size_t>(n));
    for (float& s : w_scale) s = std::uniform_real_distribution<float>(0.002f, 0.004f)(rng_);
    ir::Value* ws = b_.constant({n}, w_scale);
    ir::Value* wz = b_.graph->add_initializer(b_.graph->unique_name("wz"), std::move(w_zero));
    ir::Value* wv = b_.graph->add_initializer(b_.graph->unique_name("w"), std::move(w));
    std::vector<ir::Value*> in = {a, b_.scalar(a_scale), u8(128), wv, ws, wz};
    if (y_scale > 0) {
      in.push_back(b_.scalar(y_scale));
      in.push_back(u8(128));
    } else {
      in.push_back(nullptr);
      in.push_back(nullptr);
    }
    in.push_back(b_.random({n}, -0.5f, 0.5f));
    std::map<std::string, ir::Attribute> attrs;
    if (activation) attrs["activation"] = ir::Attribute(std::string(activation));
    return b_.node("FusedQLinearMatMul", std::move(in), attrs, 1, "ai.kiln")[0];
  }
  ir::Value* op(const std::string& type, std::vector<ir::Value*> in) { return b_.op(type, in); }
  std::shared_ptr<ir::Graph> graph() { return b_.graph; }
  void output(ir::Value* v) { b_.output(v); }

 private:
  ir::Value* u8(uint8_t v) {
    Tensor t(DataType::UInt8, {});
    t.values<uint8_t>()[0] = v;
    return b_.graph->add_initializer(b_.graph->unique_name("z"), std::move(t));
  }
  GraphBuilder b_;
  std::mt19937 rng_{7};
};

// x -> Q -> product (float result) -> Relu -> Q -> product (uint8, Gelu) -> DQ -> y: the float
// result between the two products goes through a float op, as BERT's products feed its
// SkipLayerNormalization and the next QuantizeLinear.
std::shared_ptr<ir::Graph> two_products() {
  Int8Graph g;
  ir::Value* q = g.quantize(g.input(8, 64), 0.02f, 128);
  ir::Value* r = g.op("Relu", {g.product(q, 0.02f, 64, 48, 0)});
  ir::Value* q2 = g.quantize(r, 0.05f, 128);
  g.output(g.dequantize(g.product(q2, 0.05f, 48, 32, 0.04f, "Gelu"), 0.04f, 128));
  return g.graph();
}

std::vector<const ir::Node*> nodes_of(const ir::Graph& g, const std::string& op) {
  std::vector<const ir::Node*> out;
  for (const ir::Node* n : g.nodes()) {
    if (n->op_type() == op) out.push_back(n);
  }
  return out;
}

// The executor's result on the converted graph against the interpreter's on the original: within
// `steps` output quantization steps (0.04) everywhere, at most `moved` of the values off by more
// than half a step.
void expect_close(std::shared_ptr<ir::Graph> converted, std::shared_ptr<ir::Graph> original,
                  double steps, double moved) {
  const std::vector<RtValue> feeds = testing::random_feeds(*original, 3);
  const Tensor want = testing::run_graph(original, feeds)[0].tensor();
  runtime::Executor ex(converted, {.threads = 1});
  const Tensor got = ex.run(feeds)[0].tensor();
  ASSERT_EQ(got.dims(), want.dims());
  int64_t off = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = std::abs(got.double_at(i) - want.double_at(i));
    EXPECT_LE(d, steps * 0.04 + 1e-6) << i;
    off += d > 0.02;
  }
  EXPECT_LE(static_cast<double>(off), moved * static_cast<double>(want.numel()));
}

TEST(Int8HalfPrecision, Bfloat16ProductsWriteTheirReadersTypeAndQuantizeReadsIt) {
  auto g = two_products();
  passes::Fp16Summary summary;
  passes::ConvertToFloat16 pass;
  pass.half_type = DataType::BFloat16;
  pass.summary = &summary;
  ASSERT_TRUE(pass.apply(*g));
  ir::validate_graph(*g);
  const std::vector<const ir::Node*> products = nodes_of(*g, "FusedQLinearMatMul");
  ASSERT_EQ(products.size(), 2u);
  // The float result is bfloat16, named by output_dtype; the uint8 one is untouched.
  EXPECT_EQ(products[0]->output(0)->type().dtype, DataType::BFloat16);
  ASSERT_NE(products[0]->attribute("output_dtype"), nullptr);
  EXPECT_EQ(products[0]->attribute("output_dtype")->get<int64_t>("output_dtype"),
            static_cast<int64_t>(DataType::BFloat16));
  EXPECT_EQ(products[1]->output(0)->type().dtype, DataType::UInt8);
  EXPECT_EQ(products[1]->attribute("output_dtype"), nullptr);
  // The QuantizeLinear after Relu reads bfloat16; the one on the float32 graph input keeps it.
  const std::vector<const ir::Node*> quantizes = nodes_of(*g, "QuantizeLinear");
  ASSERT_EQ(quantizes.size(), 2u);
  EXPECT_EQ(quantizes[0]->input(0)->type().dtype, DataType::Float32);
  EXPECT_EQ(quantizes[1]->input(0)->type().dtype, DataType::BFloat16);
  EXPECT_EQ(quantizes[1]->input(1)->type().dtype, DataType::Float32);  // the scale stays
  EXPECT_TRUE(nodes_of(*g, "Cast").empty());
  EXPECT_EQ(summary.casts, 0u);

  if (!backends::cpu::cpu_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 instructions";
  runtime::Executor ex(g, {.threads = 1});
  for (size_t i = 0; i < g->nodes().size(); ++i) {
    const ir::Node* n = g->nodes()[i];
    if (n->op_type() == "FusedQLinearMatMul") {
      EXPECT_EQ(ex.kernel_choices()[i].kernel, "onednn.qlinear_matmul") << n->label();
    }
    if (n->op_type() == "QuantizeLinear") {
      EXPECT_EQ(ex.kernel_choices()[i].kernel, "cpu.quantize_linear") << n->label();
    }
  }
  // bfloat16 rounding of the first product's result (8 bits: about 0.2 of the next
  // QuantizeLinear's step here) moves the second product's inputs by a step now and then.
  expect_close(g, two_products(), 2, 0.25);
}

TEST(Int8HalfPrecision, Float16LeavesTheInt8ProductFloat32ButQuantizeReadsFloat16) {
  auto g = two_products();
  passes::ConvertToFloat16 pass;  // float16: the CPU's int8 matmul has no float16 result
  ASSERT_TRUE(pass.apply(*g));
  ir::validate_graph(*g);
  const std::vector<const ir::Node*> products = nodes_of(*g, "FusedQLinearMatMul");
  EXPECT_EQ(products[0]->output(0)->type().dtype, DataType::Float32);
  EXPECT_EQ(products[0]->attribute("output_dtype"), nullptr);
  // Relu converts (a Cast before it); the QuantizeLinear after it reads its float16.
  EXPECT_EQ(nodes_of(*g, "Relu")[0]->output(0)->type().dtype, DataType::Float16);
  EXPECT_EQ(nodes_of(*g, "QuantizeLinear")[1]->input(0)->type().dtype, DataType::Float16);
  EXPECT_EQ(nodes_of(*g, "Cast").size(), 1u);
  runtime::Executor ex(g, {.threads = 1});
  for (size_t i = 0; i < g->nodes().size(); ++i) {
    if (g->nodes()[i]->op_type() == "QuantizeLinear") {
      EXPECT_EQ(ex.kernel_choices()[i].kernel, "cpu.quantize_linear");
    }
  }
  expect_close(g, two_products(), 2, 0.1);
}

TEST(Int8HalfPrecision, QuantizeOfAFloat32ValueAddsNoCast) {
  // x -> Q -> DQ -> y: nothing produces half, so nothing converts and no Cast appears.
  Int8Graph b;
  b.output(b.dequantize(b.quantize(b.input(4, 16), 0.1f, 128), 0.1f, 128));
  auto g = b.graph();
  for (DataType half : {DataType::BFloat16, DataType::Float16}) {
    passes::ConvertToFloat16 pass;
    pass.half_type = half;
    EXPECT_FALSE(pass.apply(*g));
    EXPECT_TRUE(nodes_of(*g, "Cast").empty());
  }
}

}  // namespace
}  // namespace kiln
