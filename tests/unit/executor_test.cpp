// The executor: memory plan used (in place, views), outputs never aliasing the arena across
// runs, fallback from a device backend to the CPU with copies and one warning per op type,
// dynamic batch within the declared range, stored plans used as they are, control flow on the
// interpreter's path, and thread-safe Session runs.
#include "runtime/executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "core/cpus.hpp"
#include "core/log.hpp"
#include "engine/engine_file.hpp"
#include "expect_error.hpp"
#include "fake_device.hpp"
#include "passes/passes.hpp"
#include "runtime/executor_pool.hpp"
#include "runtime/session.hpp"

namespace kiln {
namespace {

TypeInfo f32(std::vector<int64_t> dims) {
  return TypeInfo::tensor(DataType::Float32, Shape::from_values(dims));
}

Tensor random_tensor(std::vector<int64_t> dims, unsigned seed) {
  Tensor t(DataType::Float32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.values<float>()) v = dist(rng);
  return t;
}

ir::Node* node(ir::Graph& g, const char* op, std::vector<ir::Value*> in, const char* out,
               int opset = 17) {
  ir::Node* n = g.add_node(op, "", out, std::move(in), {g.add_value(out)});
  n->set_opset(opset);
  return n;
}

void expect_close(const RtValue& a, const RtValue& b) {
  ASSERT_TRUE(a.is_tensor() && b.is_tensor());
  const Tensor& x = a.tensor();
  const Tensor& y = b.tensor();
  ASSERT_EQ(x.dims(), y.dims());
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_NEAR(x.data<float>()[i], y.data<float>()[i], 1e-4 + 1e-4 * std::abs(y.data<float>()[i]))
        << "element " << i;
  }
}

// x[1,3,8,8] -> Conv -> c -> Relu -> r (in place) -> Reshape -> v (a view) -> Gemm -> y.
std::shared_ptr<ir::Graph> cnn(Shape x_shape = Shape::from_values({1, 3, 8, 8})) {
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input("x", TypeInfo::tensor(DataType::Float32, x_shape));
  ir::Value* w = g->add_initializer("w", random_tensor({4, 3, 3, 3}, 1));
  ir::Value* b = g->add_initializer("b", random_tensor({4}, 2));
  ir::Node* conv = node(*g, "Conv", {x, w, b}, "c");
  conv->set_attribute("pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1}));
  ir::Node* relu = node(*g, "Relu", {conv->output(0)}, "r");
  ir::Node* pool = node(*g, "GlobalAveragePool", {relu->output(0)}, "p");
  ir::Value* shape = g->add_initializer("shape", Tensor::from_vector<int64_t>({2}, {0, -1}));
  ir::Node* flat = node(*g, "Reshape", {pool->output(0), shape}, "v");
  ir::Value* fc_w = g->add_initializer("fc_w", random_tensor({5, 4}, 3));
  ir::Value* fc_b = g->add_initializer("fc_b", random_tensor({5}, 4));
  ir::Node* gemm = node(*g, "Gemm", {flat->output(0), fc_w, fc_b}, "y");
  gemm->set_attribute("transB", ir::Attribute(int64_t{1}));
  g->add_output(gemm->output(0));
  passes::InferShapes{}.apply(*g);
  return g;
}

const engine::StoredBuffer* planned(const engine::ExecutionPlan& p, const std::string& name) {
  for (const auto& a : p.arenas) {
    for (const auto& b : a.buffers) {
      if (b.value == name) return &b;
    }
  }
  return nullptr;
}

TEST(Executor, RunsFastKernelsInOneArenaWithInPlaceAndViews) {
  auto g = cnn();
  runtime::Executor ex(g);
  std::vector<std::string> kernels;
  for (const auto& c : ex.kernel_choices()) kernels.push_back(c.kernel);
  EXPECT_EQ(kernels, (std::vector<std::string>{"onednn.conv", "cpu.eltwise", "cpu.global_pool",
                                               "view", "onednn.gemm"}));
  engine::ExecutionPlan plan = ex.execution_plan();
  ASSERT_EQ(plan.arenas.size(), 1u);
  const auto *c = planned(plan, "c"), *r = planned(plan, "r"), *p = planned(plan, "p"),
             *v = planned(plan, "v");
  ASSERT_TRUE(c && r && p && v);
  EXPECT_EQ(r->offset, c->offset) << "Relu runs in place over the Conv output";
  EXPECT_EQ(v->offset, p->offset) << "Reshape is a view of its input";
  EXPECT_EQ(planned(plan, "y"), nullptr) << "graph outputs get memory of their own";
  ASSERT_EQ(ex.arena_summaries().size(), 1u);
  EXPECT_EQ(ex.arena_summaries()[0].shared, 2u);
  EXPECT_LT(ex.arena_summaries()[0].bytes, ex.arena_summaries()[0].naive_bytes);

  Tensor x = random_tensor({1, 3, 8, 8}, 5);
  expect_close(ex.run({x})[0], runtime::Interpreter(g).run(std::vector<RtValue>{x})[0]);
}

TEST(Executor, ReturnedTensorsNeverAliasTheArena) {
  // y = Reshape(Relu(x)): the output is a view of an arena slot, so it must be copied out.
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input("x", f32({2, 8}));
  ir::Node* relu = node(*g, "Relu", {x}, "r");
  ir::Value* shape = g->add_initializer("shape", Tensor::from_vector<int64_t>({1}, {16}));
  ir::Node* reshape = node(*g, "Reshape", {relu->output(0), shape}, "y");
  g->add_output(reshape->output(0));
  passes::InferShapes{}.apply(*g);
  runtime::Executor ex(g);
  Tensor x1 = random_tensor({2, 8}, 1), x2 = random_tensor({2, 8}, 2);
  RtValue y1 = ex.run({x1})[0];
  Tensor y1_copy = y1.tensor().clone();
  RtValue y2 = ex.run({x2})[0];
  EXPECT_NE(y1.tensor().raw_data(), y2.tensor().raw_data());
  EXPECT_EQ(std::memcmp(y1.tensor().raw_data(), y1_copy.raw_data(), y1_copy.nbytes()), 0)
      << "the second run changed the first run's result";
  expect_close(y2, runtime::Interpreter(g).run(std::vector<RtValue>{x2})[0]);
}

TEST(Executor, UnboundedValuesReuseLastRunsMemoryOnlyWhenNothingHoldsIt) {
  // An unbounded batch: the host arena is planned at its low end (batch 1); at batch 2 no value
  // fits its slot, and each gets memory of its own per run.
  Shape any_batch({Dim::symbol("n"), Dim(3), Dim(8), Dim(8)});
  auto g = cnn(any_batch);
  runtime::Executor ex(g);
  ASSERT_GT(ex.arena_summaries().at(0).values, 0u);
  Tensor x1 = random_tensor({2, 3, 8, 8}, 1), x2 = random_tensor({2, 3, 8, 8}, 2);
  RtValue y1 = ex.run({x1})[0];
  const Tensor y1_copy = y1.tensor().clone();
  RtValue y2 = ex.run({x2})[0];
  EXPECT_NE(y1.tensor().raw_data(), y2.tensor().raw_data()) << "y1 is still held";
  EXPECT_EQ(std::memcmp(y1.tensor().raw_data(), y1_copy.raw_data(), y1_copy.nbytes()), 0)
      << "the second run wrote into the first run's result";
  expect_close(y2, runtime::Interpreter(g).run(std::vector<RtValue>{x2})[0]);
  // Dropped, its memory is taken again, and the result is right.
  const void* freed = y2.tensor().raw_data();
  y2 = RtValue();
  RtValue y3 = ex.run({x1})[0];
  EXPECT_EQ(y3.tensor().raw_data(), freed);
  expect_close(y3, RtValue(y1_copy));
}

// A dynamic batch's arena is planned for batch 1: batch 1 runs in it, a bigger batch falls back
// to memory of its own value by value, and going back and forth stays right.
TEST(Executor, DynamicBatchRunsInAnArenaPlannedForItsLowEnd) {
  Shape any_batch({Dim::symbol("n"), Dim(3), Dim(8), Dim(8)});
  auto g = cnn(any_batch);
  runtime::Executor ex(g);
  const runtime::ArenaSummary& arena = ex.arena_summaries().at(0);
  EXPECT_GT(arena.values, 0u);
  EXPECT_EQ(arena.unplanned, 0u);
  EXPECT_GT(arena.bytes, 0u);
  EXPECT_LT(arena.bytes, arena.naive_bytes) << "values share space as with a static batch";
  for (int64_t batch : {1, 3, 1, 2, 1}) {
    const Tensor x = random_tensor({batch, 3, 8, 8}, static_cast<uint64_t>(10 + batch));
    expect_close(ex.run({x})[0], runtime::Interpreter(g).run(std::vector<RtValue>{x})[0]);
  }
}

TEST(Executor, FallsBackToTheCpuWithCopiesAndOneWarningPerOpType) {
  // x -> Relu -> Add -> Relu -> Mul -> Add -> Relu -> y: Add and Mul cannot run on the device.
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input("x", f32({4, 8}));
  ir::Value* k = g->add_initializer("k", random_tensor({4, 8}, 3));
  ir::Value* a = node(*g, "Relu", {x}, "a")->output(0);
  ir::Value* b = node(*g, "Add", {a, k}, "b")->output(0);
  ir::Value* c = node(*g, "Relu", {b}, "c")->output(0);
  ir::Value* d = node(*g, "Mul", {c, k}, "d")->output(0);
  ir::Value* e = node(*g, "Add", {d, x}, "e")->output(0);
  ir::Value* y = node(*g, "Relu", {e}, "y")->output(0);
  g->add_output(y);
  passes::InferShapes{}.apply(*g);

  std::vector<std::string> warnings;
  LogSink previous = set_log_sink([&](LogLevel level, std::string_view m) {
    if (level == LogLevel::Warning) warnings.emplace_back(m);
  });
  // The shared fake device (fake_device.hpp), taking Relu only: Add and Mul fall back.
  testing::FakeDevice fake;
  fake.only_ops = {"Relu"};
  runtime::ExecutorOptions options;
  options.backends = {&fake};
  std::unique_ptr<runtime::Executor> ex;
  try {
    ex = std::make_unique<runtime::Executor>(g, options);
  } catch (...) {
    set_log_sink(previous);
    throw;
  }
  set_log_sink(previous);
  ASSERT_EQ(warnings.size(), 2u) << "one warning per op type (Add twice, Mul once)";
  EXPECT_NE(warnings[0].find("Add: fake-device cannot run it (the fake device runs Relu only)"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("falling back to the CPU (cpu.binary)"), std::string::npos);
  EXPECT_NE(warnings[1].find("Mul"), std::string::npos) << warnings[1];
  EXPECT_EQ(ex->kernel_choices()[0].backend, testing::FakeDevice::kName);
  EXPECT_EQ(ex->kernel_choices()[1].backend, "cpu");
  EXPECT_TRUE(ex->arena_bytes().count(testing::FakeDevice::kName));

  Tensor xv = random_tensor({4, 8}, 9);
  RtValue out = ex->run({xv})[0];
  EXPECT_GT(fake.to_device, 0);
  EXPECT_GT(fake.to_host, 0);
  EXPECT_FALSE(fake.owns(out.tensor().raw_data())) << "results come back in host memory";
  expect_close(out, runtime::Interpreter(g).run(std::vector<RtValue>{xv})[0]);
}

TEST(Executor, DynamicBatchWithinTheDeclaredRange) {
  auto g = cnn(Shape({Dim::symbol("batch", 1, 4), Dim(3), Dim(8), Dim(8)}));
  runtime::Executor ex(g);
  const engine::StoredBuffer* c = planned(ex.execution_plan(), "c");
  ASSERT_TRUE(c);
  EXPECT_GE(c->size, 4u * 4 * 8 * 8 * 4) << "planned for the maximum batch";
  runtime::Interpreter ref(g);
  for (int64_t batch : {1, 4, 2, 4}) {
    Tensor x = random_tensor({batch, 3, 8, 8}, static_cast<unsigned>(batch));
    RtValue y = ex.run({x})[0];
    EXPECT_EQ(y.tensor().dim(0), batch);
    expect_close(y, ref.run(std::vector<RtValue>{x})[0]);
  }
  expect_error(
      [&] {
        ex.run({random_tensor({5, 3, 8, 8}, 1)});
      },
      ErrorCode::InvalidArgument, "outside the declared range");
}

// Constant weights of Gemm (transposed, a classifier's) and MatMul are packed once into the layout
// oneDNN's primitive picks; each row count gets its own primitive, and an entry whose layout is
// the same reuses the packed bytes. Every batch, in any order, matches the reference.
TEST(Executor, PackedMatrixWeightsServeEveryBatch) {
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input(
      "x", TypeInfo::tensor(DataType::Float32, Shape({Dim::symbol("batch", 1, 64), Dim(48)})));
  ir::Node* gemm = node(*g, "Gemm",
                        {x, g->add_initializer("w", random_tensor({40, 48}, 1)),
                         g->add_initializer("b", random_tensor({40}, 2))},
                        "h");
  gemm->set_attribute("transB", ir::Attribute(int64_t{1}));
  ir::Node* matmul = node(
      *g, "MatMul", {gemm->output(0), g->add_initializer("v", random_tensor({40, 24}, 3))}, "y");
  g->add_output(matmul->output(0));
  passes::InferShapes{}.apply(*g);
  runtime::Executor ex(g);
  std::vector<std::string> kernels;
  for (const auto& c : ex.kernel_choices()) kernels.push_back(c.kernel);
  EXPECT_EQ(kernels, (std::vector<std::string>{"onednn.gemm", "onednn.matmul"}));
  runtime::Interpreter ref(g);
  for (int64_t batch : {1, 64, 7, 1, 33}) {
    Tensor xv = random_tensor({batch, 48}, static_cast<unsigned>(batch) + 10);
    expect_close(ex.run({xv})[0], ref.run(std::vector<RtValue>{xv})[0]);
  }
}

TEST(Executor, UsesAStoredPlanAsItIs) {
  auto g = cnn();
  engine::ExecutionPlan plan = runtime::Executor(g).execution_plan();
  // A choice the executor would not make itself proves the stored one is used.
  plan.kernels[0].kernel = "reference";
  runtime::Executor ex(g, {}, &plan);
  EXPECT_EQ(ex.kernel_choices()[0].kernel, "reference");
  EXPECT_EQ(ex.kernel_choices()[1].kernel, "cpu.eltwise");
  Tensor x = random_tensor({1, 3, 8, 8}, 3);
  expect_close(ex.run({x})[0], runtime::Interpreter(g).run(std::vector<RtValue>{x})[0]);

  engine::ExecutionPlan small = plan;
  for (auto& b : small.arenas[0].buffers) b.size = 64;
  expect_error([&] { runtime::Executor(g, {}, &small); }, ErrorCode::InvalidArgument,
               "recompile the model");

  // A kernel this build does not have: chosen afresh, with a warning.
  engine::ExecutionPlan unknown = runtime::Executor(g).execution_plan();
  unknown.kernels[0].kernel = "onednn.conv_from_the_future";
  std::vector<std::string> warnings;
  LogSink previous = set_log_sink([&](LogLevel, std::string_view m) { warnings.emplace_back(m); });
  runtime::Executor fallback(g, {}, &unknown);
  set_log_sink(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("onednn.conv_from_the_future"), std::string::npos);
  EXPECT_EQ(fallback.kernel_choices()[0].kernel, "reference");
  expect_close(fallback.run({x})[0], runtime::Interpreter(g).run(std::vector<RtValue>{x})[0]);
}

TEST(Executor, PlanRoundTripsThroughTheEngineFile) {
  auto g = cnn();
  runtime::Executor ex(g);
  engine::ExecutionPlan plan = ex.execution_plan();
  ir::Model m;
  m.graph = g;
  m.ir_version = 8;
  auto path = std::filesystem::temp_directory_path() / "kiln_executor_plan.kiln";
  engine::write_engine(m, {}, path.string(), &plan);
  engine::LoadedEngine e = engine::read_engine(path.string());
  ASSERT_TRUE(e.plan.has_value());
  ASSERT_EQ(e.plan->arenas.size(), 1u);
  EXPECT_EQ(e.plan->arenas[0].bytes, plan.arenas[0].bytes);
  ASSERT_EQ(e.plan->arenas[0].buffers.size(), plan.arenas[0].buffers.size());
  for (size_t i = 0; i < plan.arenas[0].buffers.size(); ++i) {
    EXPECT_EQ(e.plan->arenas[0].buffers[i].value, plan.arenas[0].buffers[i].value);
    EXPECT_EQ(e.plan->arenas[0].buffers[i].offset, plan.arenas[0].buffers[i].offset);
    EXPECT_EQ(e.plan->arenas[0].buffers[i].size, plan.arenas[0].buffers[i].size);
  }
  ASSERT_EQ(e.plan->kernels.size(), plan.kernels.size());
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    EXPECT_EQ(e.plan->kernels[i].kernel, plan.kernels[i].kernel);
  }
  Session s(path.string());
  ASSERT_TRUE(s.executor());
  EXPECT_TRUE(s.executor()->arena_summaries()[0].from_engine);

  // A file of the previous format version is refused with a clear message.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    uint32_t old_version = 1;
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&old_version), sizeof old_version);
  }
  expect_error([&] { engine::read_engine(path.string()); }, ErrorCode::Unsupported,
               "engine file format version 1, this Kiln reads 2 to 3: recompile the model");
  std::filesystem::remove(path);
}

TEST(Executor, ControlFlowRunsOnTheInterpreterPathWithCaptures) {
  // r = Relu(x) on a fast kernel; If(cond) then r + r else -r, both branches capturing r.
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input("x", f32({3}));
  ir::Value* cond = g->add_input("cond", TypeInfo::tensor(DataType::Bool, Shape::from_values({})));
  ir::Value* r = node(*g, "Relu", {x}, "r")->output(0);
  auto branch = [&](const char* op, std::vector<ir::Value*> in) {
    auto b = std::make_shared<ir::Graph>(op, g.get());
    ir::Node* n =
        b->add_node(op, "", "", std::move(in), {b->add_value(std::string(op) + "_out", f32({3}))});
    n->set_opset(17);
    b->add_output(n->output(0));
    return b;
  };
  ir::Node* iff = g->add_node("If", "", "if", {cond}, {g->add_value("y", f32({3}))});
  iff->set_opset(17);
  iff->set_attribute("then_branch", ir::Attribute(ir::GraphPtr(branch("Add", {r, r}))));
  iff->set_attribute("else_branch", ir::Attribute(ir::GraphPtr(branch("Neg", {r}))));
  g->add_output(iff->output(0));
  passes::InferShapes{}.apply(*g);
  runtime::Executor ex(g);
  EXPECT_EQ(ex.kernel_choices()[0].kernel, "cpu.eltwise");
  EXPECT_EQ(ex.kernel_choices()[1].kernel, "reference");
  Tensor xv = Tensor::from_vector<float>({3}, {-1.f, 2.f, 3.f});
  for (bool c : {true, false}) {
    Tensor cv = Tensor::scalar<bool>(c);
    RtValue y = ex.run({xv, cv})[0];
    std::vector<float> want = c ? std::vector<float>{0, 4, 6} : std::vector<float>{0, -2, -3};
    ASSERT_EQ(y.tensor().numel(), 3);
    for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(y.tensor().data<float>()[i], want[i]);
  }
}

TEST(Executor, SessionRunsAreThreadSafe) {
  ir::Model m;
  m.graph = cnn(Shape({Dim::symbol("batch", 1, 4), Dim(3), Dim(8), Dim(8)}));
  m.ir_version = 8;
  runtime::Interpreter ref(m.graph);
  std::vector<Tensor> inputs;
  std::vector<RtValue> expected;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(random_tensor({i % 4 + 1, 3, 8, 8}, 100 + i));
    expected.push_back(ref.run(std::vector<RtValue>{inputs.back()})[0]);
  }
  // Runs overlap on up to 4 executors (made as runs find the others busy), each on one thread.
  SessionOptions options;
  options.threads = 1;
  options.parallel_runs = 4;
  Session s(std::move(m), options);
  EXPECT_EQ(s.executors_made(), 1u);
  EXPECT_EQ(s.parallel_run_limit(), 4u);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 10; ++rep) {
        RtValue y = s.run({}, {{"x", inputs[t]}})[0];
        const Tensor& a = y.tensor();
        const Tensor& b = expected[t].tensor();
        if (a.dims() != b.dims()) {
          ++mismatches[t];
          continue;
        }
        for (int64_t i = 0; i < a.numel(); ++i) {
          if (std::abs(a.data<float>()[i] - b.data<float>()[i]) > 1e-4f) ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
  EXPECT_GE(s.executors_made(), 1u);
  EXPECT_LE(s.executors_made(), 4u);
}

TEST(Executor, PoolMakesExecutorsOnlyWhenRunsOverlapAndWaitsAtItsLimit) {
  auto g = cnn();
  int made = 0;
  runtime::ExecutorPool pool(
      std::make_unique<runtime::Executor>(g),
      [&] {
        ++made;
        return std::make_unique<runtime::Executor>(g);
      },
      2);
  {
    // One thread's runs always get the first executor back.
    for (int i = 0; i < 3; ++i) EXPECT_EQ(&*pool.acquire(), &pool.first());
  }
  EXPECT_EQ(made, 0);
  std::optional<runtime::ExecutorPool::Lease> a(pool.acquire());
  std::optional<runtime::ExecutorPool::Lease> b(pool.acquire());
  EXPECT_EQ(made, 1);
  EXPECT_NE(&**a, &**b);
  const Tensor xv = random_tensor({1, 3, 8, 8}, 5);
  const RtValue want = runtime::Interpreter(g).run(std::vector<RtValue>{xv})[0];
  expect_close((*b)->run({xv})[0], want);
  // At the limit a third run waits until one is given back, then gets that one.
  runtime::Executor* freed = &**a;
  auto third = std::async(std::launch::async, [&] { return &*pool.acquire(); });
  EXPECT_EQ(third.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  a.reset();
  EXPECT_EQ(third.get(), freed);
  EXPECT_EQ(pool.size(), 2u);
}

TEST(Executor, PoolWhoseFirstRunsAloneKeepsItOutOfOverlappingRuns) {
  auto g = cnn();
  runtime::ExecutorPool pool(
      std::make_unique<runtime::Executor>(g),
      [&] { return std::make_unique<runtime::Executor>(g); }, 3, /*first_runs_alone=*/true);
  // A lone caller gets the first (the session's threads).
  { EXPECT_EQ(&*pool.acquire(), &pool.first()); }
  std::optional<runtime::ExecutorPool::Lease> a(pool.acquire());
  ASSERT_EQ(&**a, &pool.first());
  // While it runs, the others get executors of their own.
  std::optional<runtime::ExecutorPool::Lease> b(pool.acquire());
  EXPECT_NE(&**b, &pool.first());
  a.reset();
  // The first is idle, but another run is in flight: a new run is not given the first.
  std::optional<runtime::ExecutorPool::Lease> c(pool.acquire());
  EXPECT_NE(&**c, &pool.first());
  EXPECT_NE(&**c, &**b);
  // At the limit, with only the first idle, a run waits for one of the others...
  auto fourth = std::async(std::launch::async, [&] { return &*pool.acquire(); });
  EXPECT_EQ(fourth.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  runtime::Executor* freed = &**c;
  c.reset();
  EXPECT_EQ(fourth.get(), freed);
  b.reset();
  // ...and alone again, a run gets the first back.
  EXPECT_EQ(&*pool.acquire(), &pool.first());
  EXPECT_EQ(pool.size(), 3u);
  // The pool remembers that runs overlapped, for a while.
  EXPECT_TRUE(pool.overlapped_within(std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(pool.overlapped_within(std::chrono::milliseconds(10)));
}

TEST(Executor, PoolOfOneCallerNeverOverlaps) {
  auto g = cnn();
  runtime::ExecutorPool pool(
      std::make_unique<runtime::Executor>(g),
      [&] { return std::make_unique<runtime::Executor>(g); }, 3, /*first_runs_alone=*/true);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(&*pool.acquire(), &pool.first());
  EXPECT_FALSE(pool.overlapped_within(std::chrono::seconds(60)));
}

TEST(Executor, PoolThatCannotMakeMoreSharesWhatItHas) {
  auto g = cnn();
  runtime::ExecutorPool pool(
      std::make_unique<runtime::Executor>(g),
      []() -> std::unique_ptr<runtime::Executor> { throw std::bad_alloc(); }, 3);
  std::optional<runtime::ExecutorPool::Lease> a(pool.acquire());
  auto second = std::async(std::launch::async, [&] { return &*pool.acquire(); });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(pool.limit(), 1u) << "the failure lowered the limit to what exists";
  a.reset();
  EXPECT_EQ(second.get(), &pool.first());
}

TEST(Executor, ParallelRunsAreCheckedAtOpen) {
  auto open = [](std::map<std::string, std::string> config, int parallel = 0, int threads = 0) {
    ir::Model m;
    m.graph = cnn();
    m.ir_version = 8;
    SessionOptions o;
    o.config = std::move(config);
    o.parallel_runs = parallel;
    o.threads = threads;
    return std::make_unique<Session>(std::move(m), o);
  };
  EXPECT_EQ(open({{"parallel_runs", "3"}})->parallel_run_limit(), 3u);
  // Automatic: runs of every core (the default) overlap on executors of one thread each, one a
  // core, besides the first (which runs alone); single-threaded runs overlap up to the CPUs
  // there are (at most kAutoParallelRuns).
  const size_t cpus = online_cpus();
  EXPECT_EQ(open({})->parallel_run_limit(),
            std::clamp<size_t>(cpus + 1, 1, static_cast<size_t>(kAutoParallelRuns)));
  const size_t one_thread = open({}, 0, 1)->parallel_run_limit();
  EXPECT_GE(one_thread, 1u);
  EXPECT_LE(one_thread, static_cast<size_t>(kAutoParallelRuns));
  expect_error(
      [&] {
        open({{"parallel_runs", "4x"}});
      },
      ErrorCode::InvalidArgument, "config 'parallel_runs' must be a whole number");
  expect_error([&] { open({}, kMaxParallelRuns + 1); }, ErrorCode::InvalidArgument,
               "parallel_runs must be 0 (automatic) to 64");
  expect_error([&] { open({}, -1); }, ErrorCode::InvalidArgument, "parallel_runs must be");
}

}  // namespace
}  // namespace kiln
