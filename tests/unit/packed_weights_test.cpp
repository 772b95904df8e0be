// Weights packed at compile time: the executor's packed weights go into the engine's plan, read
// back byte for byte, and a session opened on the engine computes from them. Which copy a
// kernel read is observable: the tests replace the plain weights with garbage after packing,
// so outputs match the reference only when the packed bytes were used, and a packed weight
// whose layout does not fit (another CPU's, here a changed format) makes the kernel pack the
// plain weights again.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "backends/cpu/cpu_backend.hpp"
#include "engine/engine_file.hpp"
#include "expect_error.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/session.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;

Tensor random_tensor(const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t(DataType::Float32, dims);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.values<float>()) v = dist(rng);
  return t;
}

// x (N x 16 x 10 x 10) -> Conv 5x5 -> Relu -> Conv 5x5 -> Conv 1x1 -> y: the values between the
// convolutions stay blocked, so each convolution runs oneDNN's blocked direct kernels on packed
// weights (5x5: a 3x3 of stride 1 takes the Winograd kernels, whose weights are not stored).
std::shared_ptr<ir::Graph> conv_chain(Dim batch, std::mt19937& rng, int64_t kernel = 5) {
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input(
      "x", TypeInfo::tensor(DataType::Float32, Shape({batch, Dim(16), Dim(10), Dim(10)})));
  int count = 0;
  auto conv = [&](ir::Value* in, int64_t c, int64_t m, int64_t k) {
    ir::Value* w = g->add_initializer(fmt::format("w{}", count), random_tensor({m, c, k, k}, rng));
    ir::Value* b = g->add_initializer(fmt::format("b{}", count), random_tensor({m}, rng));
    ir::Value* y = g->add_value(fmt::format("y{}", count));
    ir::Node* n = g->add_node("Conv", "", fmt::format("conv{}", count++), {in, w, b}, {y});
    n->set_opset(17);
    n->set_attribute("pads", ir::Attribute(std::vector<int64_t>(4, k / 2)));
    return y;
  };
  ir::Value* a = conv(x, 16, 32, kernel);
  ir::Value* r = g->add_value("relu");
  g->add_node("Relu", "", "relu", {a}, {r})->set_opset(17);
  g->add_output(conv(conv(r, 32, 16, kernel), 16, 8, 1));
  passes::InferShapes{}.apply(*g);
  return g;
}

// The plain weights of every Conv replaced by other random values.
void scramble_plain_weights(ir::Graph& g, std::mt19937& rng) {
  for (const ir::Node* n : g.nodes()) {
    if (n->op_type() != "Conv") continue;
    ir::Value* w = n->input(1);
    w->set_constant(random_tensor(w->constant().dims(), rng));
  }
}

// The largest difference, relative to b's largest magnitude (at least 1): the chain's outputs
// reach a few hundred, where float32 sums in another order differ by a few 1e-4.
double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dims(), b.dims());
  double worst = 0, scale = 1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::abs(double(b.data<float>()[i])));
  }
  return worst / scale;
}

class PackedWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (backends::CpuBackend::instance().activation_layout().block == 0) {
      GTEST_SKIP() << "blocked layouts are off (KILN_CPU_BLOCKED=0): nothing is packed";
    }
    dir_ = fs::temp_directory_path() /
           fmt::format("kiln_packed_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Compiles `g` as `kiln compile` does: the plan with the kernels' packed weights.
  static engine::ExecutionPlan compile_plan(const std::shared_ptr<ir::Graph>& g) {
    runtime::Executor prepared(g, {.threads = 1});
    engine::ExecutionPlan plan = prepared.execution_plan();
    plan.packed = prepared.pack_weights();
    return plan;
  }

  std::string write(const std::shared_ptr<ir::Graph>& g, const engine::ExecutionPlan& plan) {
    ir::Model m;
    m.graph = g;
    std::string path = (dir_ / "model.kiln").string();
    engine::write_engine(m, engine::EngineInfo{}, path, &plan);
    return path;
  }

  fs::path dir_;
};

TEST_F(PackedWeights, EveryBlockedConvolutionStoresItsWeightsAndReadsBackTheSameBytes) {
  std::mt19937 rng(1);
  auto g = conv_chain(Dim(2), rng);
  engine::ExecutionPlan plan = compile_plan(g);
  ASSERT_EQ(plan.packed.size(), 3u);
  const std::vector<ir::Node*> nodes = g->nodes();
  for (const engine::StoredPackedWeight& p : plan.packed) {
    ASSERT_LT(p.node, nodes.size());
    EXPECT_EQ(nodes[p.node]->op_type(), "Conv");
    EXPECT_EQ(p.input, 1u);
    EXPECT_EQ(p.backend, "cpu");
    EXPECT_EQ(p.format.rfind("onednn blocked f32", 0), 0u) << p.format;
    // Padded to whole channel blocks: at least the plain bytes.
    EXPECT_GE(p.data.nbytes(), nodes[p.node]->input(1)->constant().nbytes());
  }
  engine::LoadedEngine e = engine::read_engine(write(g, plan));
  ASSERT_TRUE(e.plan.has_value());
  ASSERT_EQ(e.plan->packed.size(), plan.packed.size());
  for (size_t i = 0; i < plan.packed.size(); ++i) {
    const engine::StoredPackedWeight &a = plan.packed[i], &b = e.plan->packed[i];
    EXPECT_EQ(b.node, a.node);
    EXPECT_EQ(b.input, a.input);
    EXPECT_EQ(b.format, a.format);
    ASSERT_EQ(b.data.nbytes(), a.data.nbytes());
    EXPECT_EQ(std::memcmp(b.data.raw_data(), a.data.raw_data(), a.data.nbytes()), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data.raw_data()) % engine::kWeightAlignment, 0u);
  }
}

TEST_F(PackedWeights, ASessionOnTheEngineComputesFromThePackedBytes) {
  std::mt19937 rng(2);
  auto g = conv_chain(Dim(2), rng);
  Tensor x = random_tensor({2, 16, 10, 10}, rng);
  Tensor want = runtime::Interpreter(g).run({RtValue(x)})[0].tensor();
  engine::ExecutionPlan plan = compile_plan(g);
  scramble_plain_weights(*g, rng);
  Tensor scrambled = runtime::Interpreter(g).run({RtValue(x)})[0].tensor();
  ASSERT_GT(max_diff(scrambled, want), 0.1) << "the scrambled weights must change y";

  Session s(write(g, plan), {.threads = 1});
  for (int run = 0; run < 2; ++run) {
    Tensor got = s.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
    // Summation order differs between the AVX2 and AVX-512 kernels and the reference loops.
    EXPECT_LT(max_diff(got, want), 2e-4) << "run " << run;
  }
}

TEST_F(PackedWeights, AWeightPackedForAnotherLayoutIsPackedAgainFromThePlainOne) {
  std::mt19937 rng(3);
  auto g = conv_chain(Dim(2), rng);
  Tensor x = random_tensor({2, 16, 10, 10}, rng);
  engine::ExecutionPlan plan = compile_plan(g);
  scramble_plain_weights(*g, rng);
  Tensor want = runtime::Interpreter(g).run({RtValue(x)})[0].tensor();
  // As an engine packed on a CPU with other vector units would read: the layout differs.
  for (engine::StoredPackedWeight& p : plan.packed) p.format += " (another CPU)";
  Session s(write(g, plan), {.threads = 1});
  Tensor got = s.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
  EXPECT_LT(max_diff(got, want), 1e-4) << "the plain (scrambled) weights were not used";
}

TEST_F(PackedWeights, ADynamicBatchIsPackedOnceForEveryBatch) {
  std::mt19937 rng(4);
  auto g = conv_chain(Dim::symbol("N", 1, 8), rng);
  engine::ExecutionPlan plan = compile_plan(g);
  ASSERT_EQ(plan.packed.size(), 3u);
  std::vector<Tensor> xs, want;
  for (int64_t n : {1, 3}) {
    xs.push_back(random_tensor({n, 16, 10, 10}, rng));
    want.push_back(runtime::Interpreter(g).run({RtValue(xs.back())})[0].tensor());
  }
  scramble_plain_weights(*g, rng);
  Session s(write(g, plan), {.threads = 1});
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor got = s.run({{"x", RtValue(xs[i])}}).at(s.outputs()[0].name).tensor();
    EXPECT_LT(max_diff(got, want[i]), 1e-4) << "batch " << xs[i].dims()[0];
  }
}

TEST_F(PackedWeights, TheReaderRefusesPackedWeightsForAnInputThatIsNotAConstant) {
  std::mt19937 rng(5);
  auto g = conv_chain(Dim(2), rng);
  engine::ExecutionPlan plan = compile_plan(g);
  ASSERT_FALSE(plan.packed.empty());
  plan.packed[0].input = 0;  // x, the graph input
  std::string path = write(g, plan);
  expect_error([&] { engine::read_engine(path); }, ErrorCode::InvalidArgument,
               "that input is not a constant");
  plan.packed[0].input = 1;
  plan.packed.push_back(plan.packed[0]);
  path = write(g, plan);
  expect_error([&] { engine::read_engine(path); }, ErrorCode::InvalidArgument, "given twice");
}

// The packed weight of `p`'s constant re-laid out row-major (what a CPU whose kernels read plain
// OIHW weights would store): a valid layout this CPU's kernel does not compute with.
void as_row_major_layout(engine::StoredPackedWeight& p, const Tensor& plain) {
  const std::vector<int64_t>& d = plain.dims();
  p.format = fmt::format(
      "onednn blocked f32 dims {0}x{1}x{2}x{3} padded {0}x{1}x{2}x{3} offsets 0x0x0x0 offset0 0 "
      "strides {4}x{5}x{3}x1 inner none",
      d[0], d[1], d[2], d[3], d[1] * d[2] * d[3], d[2] * d[3]);
  p.data = Tensor(DataType::UInt8, {static_cast<int64_t>(plain.nbytes())});
  std::memcpy(p.data.raw_data(), plain.raw_data(), plain.nbytes());
}

TEST_F(PackedWeights, AWeightOnlyPackingKernelsReadIsStoredOnceAndReadsBackWhole) {
  std::mt19937 rng(6);
  auto g = conv_chain(Dim(2), rng);
  engine::ExecutionPlan plan = compile_plan(g);
  uint64_t plain = 0, packed = 0;
  for (const engine::StoredPackedWeight& p : plan.packed) {
    plain += g->nodes()[p.node]->input(1)->constant().nbytes();
    packed += p.data.nbytes();
  }
  engine::LoadedEngine e = engine::read_engine(write(g, plan));
  // The biases stay plain; every convolution's weights are in the file once, packed.
  EXPECT_LT(e.weights_size, packed + plain / 2);
  EXPECT_GE(e.weights_size, packed);
  EXPECT_TRUE(e.deferred.empty());
  for (const ir::Node* n : g->nodes()) {
    if (n->op_type() != "Conv") continue;
    const Tensor& want = n->input(1)->constant();
    const Tensor& got = e.model.graph->find_local_value(n->input(1)->name())->constant();
    ASSERT_EQ(got.dims(), want.dims());
    EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << n->name();
  }
}

TEST_F(PackedWeights, ASessionLeavesTheStoredOnceWeightsPackedUntilTheGraphIsRead) {
  std::mt19937 rng(7);
  auto g = conv_chain(Dim::symbol("N", 1, 8), rng);
  Tensor x = random_tensor({3, 16, 10, 10}, rng);
  Tensor want = runtime::Interpreter(g).run({RtValue(x)})[0].tensor();
  const std::string path = write(g, compile_plan(g));
  engine::ReadOptions defer;
  defer.defer_unpacking = true;
  engine::LoadedEngine e = engine::read_engine(path, defer);
  ASSERT_EQ(e.deferred.size(), 3u);
  for (const engine::DeferredWeight& w : e.deferred) {
    const std::vector<float> zeros(static_cast<size_t>(w.plain.numel()), 0.f);
    EXPECT_EQ(std::memcmp(w.plain.raw_data(), zeros.data(), w.plain.nbytes()), 0)
        << "not filled until asked";
  }

  Session s(path, {.threads = 1});
  Tensor got = s.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
  EXPECT_LT(max_diff(got, want), 2e-4);
  EXPECT_EQ(s.weights_left_packed(), 3u);
  // What reads the graph sees the plain weights, and the kernels keep computing right.
  EXPECT_LT(max_diff(runtime::Interpreter(s.model().graph).run({RtValue(x)})[0].tensor(), want),
            1e-5);
  EXPECT_EQ(s.weights_left_packed(), 0u);
  got = s.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
  EXPECT_LT(max_diff(got, want), 2e-4);
  // The interpreter of a session on the engine reads plain weights: they are filled for it.
  SessionOptions o;
  o.config["executor"] = "interpreter";
  Session interpreted(path, o);
  EXPECT_EQ(interpreted.weights_left_packed(), 0u);
  got = interpreted.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
  EXPECT_LT(max_diff(got, want), 1e-5);
}

TEST_F(PackedWeights, AnotherCpusLayoutStoredOnceIsPackedAgainFromItsBytes) {
  std::mt19937 rng(8);
  auto g = conv_chain(Dim(2), rng);
  Tensor x = random_tensor({2, 16, 10, 10}, rng);
  Tensor want = runtime::Interpreter(g).run({RtValue(x)})[0].tensor();
  engine::ExecutionPlan plan = compile_plan(g);
  for (engine::StoredPackedWeight& p : plan.packed)
    as_row_major_layout(p, g->nodes()[p.node]->input(1)->constant());
  const std::string path = write(g, plan);
  engine::ReadOptions defer;
  defer.defer_unpacking = true;
  ASSERT_EQ(engine::read_engine(path, defer).deferred.size(), 3u) << "stored once";
  // The plain forms stay zero pages: only the stored bytes can give the right output.
  Session s(path, {.threads = 1});
  Tensor got = s.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
  EXPECT_LT(max_diff(got, want), 2e-4);
  EXPECT_EQ(s.weights_left_packed(), 3u);
}

TEST_F(PackedWeights, ThreeByThreeConvolutionsRunWinogradAndKeepTheirPlainWeights) {
  // The same chain with 3x3 kernels: oneDNN's Winograd kernels (float32, stride 1, 16+
  // channels) pack into a layout the engine does not store, so only the 1x1 weight is stored
  // packed, and the engine computes what the reference does.
  std::mt19937 rng(7);
  auto g = conv_chain(Dim(2), rng, 3);
  Tensor x = random_tensor({2, 16, 10, 10}, rng);
  Tensor want = runtime::Interpreter(g).run({RtValue(x)})[0].tensor();
  engine::ExecutionPlan plan = compile_plan(g);
  ASSERT_EQ(plan.packed.size(), 1u);
  EXPECT_EQ(g->nodes()[plan.packed[0].node]->name(), "conv2");  // the 1x1
  Session s(write(g, plan), {.threads = 1});
  for (int run = 0; run < 2; ++run) {
    Tensor got = s.run({{"x", RtValue(x)}}).at(s.outputs()[0].name).tensor();
    EXPECT_LT(max_diff(got, want), 2e-4) << "run " << run;
  }
}

TEST_F(PackedWeights, StridedConvolutionsWithSmallOutputsRunChannelsLastFromThePackedBytes) {
  // A float32 3x3 convolution of stride 2 with 64+ channels and an output of 14x14 or less
  // runs oneDNN's brgemm convolution on channels-last copies of its blocked input and output;
  // the engine stores its weights in that kernel's layout and the session computes from them.
  std::mt19937 rng(8);
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input(
      "x", TypeInfo::tensor(DataType::Float32, Shape({Dim(1), Dim(64), Dim(14), Dim(14)})));
  ir::Value* w = g->add_initializer("w", random_tensor({96, 64, 3, 3}, rng));
  ir::Value* b = g->add_initializer("b", random_tensor({96}, rng));
  ir::Value* y = g->add_value("y");
  ir::Node* n = g->add_node("Conv", "", "strided", {x, w, b}, {y});
  n->set_opset(17);
  n->set_attribute("pads", ir::Attribute(std::vector<int64_t>(4, 1)));
  n->set_attribute("strides", ir::Attribute(std::vector<int64_t>{2, 2}));
  ir::Value* r = g->add_value("r");
  g->add_node("Relu", "", "relu", {y}, {r})->set_opset(17);
  ir::Value* w2 = g->add_initializer("w2", random_tensor({16, 96, 1, 1}, rng));
  ir::Value* out = g->add_value("out");
  g->add_node("Conv", "", "project", {r, w2}, {out})->set_opset(17);
  g->add_output(out);
  passes::InferShapes{}.apply(*g);

  Tensor xt = random_tensor({1, 64, 14, 14}, rng);
  Tensor want = runtime::Interpreter(g).run({RtValue(xt)})[0].tensor();
  engine::ExecutionPlan plan = compile_plan(g);
  ASSERT_EQ(plan.packed.size(), 2u);
  scramble_plain_weights(*g, rng);
  Session s(write(g, plan), {.threads = 1});
  for (int run = 0; run < 2; ++run) {
    Tensor got = s.run({{"x", RtValue(xt)}}).at(s.outputs()[0].name).tensor();
    EXPECT_LT(max_diff(got, want), 2e-4) << "run " << run;
  }
}

}  // namespace
}  // namespace kiln
