// The header-only C++ wrapper (kiln.hpp) over libkiln.so: RAII handles, typed tensors, exceptions
// that carry the status and Kiln's message, and concurrent runs of one session.
#include "kiln/kiln.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <thread>

namespace {

std::string model(const std::string& name) {
  return std::string(KILN_CAPI_MODELS_DIR) + "/" + name;
}

// Runs fn and checks it throws kiln::Exception with `status` and a message containing `needle`.
template <typename Fn>
void expect_status(Fn&& fn, KilnStatus status, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected " << kiln_status_name(status);
  } catch (const kiln::Exception& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(std::string("[") + kiln_status_name(status) + "]", 0),
              0u);
  }
}

std::map<std::string, kiln::Value> basic_feeds(int64_t batch) {
  std::vector<float> x(static_cast<size_t>(batch * 3));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 2.5f;
  bool b[2] = {true, false};
  std::map<std::string, kiln::Value> feeds;
  feeds.emplace("x", kiln::Value::tensor<float>({batch, 3}, x));
  feeds.emplace("n", kiln::Value::tensor<int64_t>({2}, {5, -6}));
  feeds.emplace("s", kiln::Value::strings({2}, {"a", std::string("z\0z", 3)}));
  feeds.emplace("b", kiln::Value::tensor<bool>({2}, b, 2));
  return feeds;
}

TEST(CppWrapper, DescribesInputsAndOutputs) {
  kiln::Session s(model("basic.onnx"));
  EXPECT_FALSE(kiln::version().empty());
  std::vector<kiln::IoInfo> in = s.inputs();
  ASSERT_EQ(in.size(), 4u);
  EXPECT_EQ(in[0].name, "x");
  EXPECT_EQ(in[0].dtype, KILN_DTYPE_FLOAT32);
  ASSERT_EQ(in[0].rank, 2);
  EXPECT_EQ(in[0].dims[0].value, -1);
  EXPECT_EQ(in[0].dims[0].symbol, "batch");
  EXPECT_EQ(in[0].dims[1].value, 3);
  EXPECT_EQ(in[2].dtype, KILN_DTYPE_STRING);
  EXPECT_EQ(s.outputs().at(4).name, "nb");
  EXPECT_EQ(s.output_count(), 5u);
}

TEST(CppWrapper, RunsAndReadsTypedOutputs) {
  kiln::Session s(model("basic.onnx"), kiln::SessionOptions().set_threads(1));
  auto feeds = basic_feeds(2);
  std::vector<kiln::Value> out = s.run({}, feeds);
  ASSERT_EQ(out.size(), 5u);
  std::vector<float> y = out[0].to_vector<float>();
  ASSERT_EQ(y.size(), 6u);
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_EQ(y[i], std::max(0.0f, static_cast<float>(i) - 2.5f));
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[2].to_vector<int64_t>(), (std::vector<int64_t>{10, -12}));
  EXPECT_EQ(out[3].strings(), (std::vector<std::string>{"a", std::string("z\0z", 3)}));
  const bool* nb = out[4].data<bool>();
  EXPECT_FALSE(nb[0]);
  EXPECT_TRUE(nb[1]);
  // Named outputs come back in the order asked.
  std::vector<kiln::Value> two = s.run({"nb", "n2"}, feeds);
  EXPECT_EQ(two[0].dtype(), KILN_DTYPE_BOOL);
  EXPECT_EQ(two[1].dtype(), KILN_DTYPE_INT64);
}

TEST(CppWrapper, BorrowedInputsAreNeverAliasedByOutputs) {
  kiln::Session s(model("basic.onnx"));
  auto feeds = basic_feeds(1);
  std::vector<float> x = {1.5f, -2.0f, 3.0f};
  feeds.erase("x");
  feeds.emplace("x", kiln::Value::tensor<float>({1, 3}, x, KILN_MEMORY_BORROW));
  std::vector<kiln::Value> out = s.run({"x_id"}, feeds);
  EXPECT_NE(static_cast<const void*>(out[0].data<float>()), static_cast<const void*>(x.data()));
  feeds.clear();
  std::fill(x.begin(), x.end(), 0.0f);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.0f}));
  // Kiln read x in place and did not write into it (Relu could have run in place).
  std::vector<float> x2 = {-1.0f, -2.0f, -3.0f};
  auto feeds2 = basic_feeds(1);
  feeds2.erase("x");
  feeds2.emplace("x", kiln::Value::tensor<float>({1, 3}, x2, KILN_MEMORY_BORROW));
  s.run({"y"}, feeds2);
  EXPECT_EQ(x2, (std::vector<float>{-1.0f, -2.0f, -3.0f}));
}

TEST(CppWrapper, ErrorsBecomeExceptionsAndTheSessionStaysUsable) {
  expect_status([] { kiln::Session s(model("nope.onnx")); }, KILN_NOT_FOUND, "nope.onnx");
  expect_status([] { kiln::SessionOptions().set_threads(-2); }, KILN_INVALID_ARGUMENT, "-2");
  expect_status(
      [] { kiln::Session s(model("relu.onnx"), kiln::SessionOptions().set_device("npu")); },
      KILN_UNSUPPORTED, "'npu'");
  kiln::Session s(model("basic.onnx"));
  auto feeds = basic_feeds(2);
  expect_status([&] { s.run({"missing"}, feeds); }, KILN_NOT_FOUND, "no output named 'missing'");
  {
    auto bad = basic_feeds(2);
    bad.erase("n");
    bad.emplace("n", kiln::Value::tensor<int32_t>({2}, {1, 2}));
    expect_status([&] { s.run({}, bad); }, KILN_INVALID_ARGUMENT,
                  "input 'n': expected element type int64, got int32");
  }
  {
    auto bad = basic_feeds(2);
    bad.erase("n");
    bad.emplace("n", kiln::Value::tensor<int64_t>({3}, {1, 2, 3}));
    expect_status([&] { s.run({}, bad); }, KILN_INVALID_ARGUMENT, "input 'n': expected shape");
  }
  {
    auto bad = basic_feeds(2);
    bad.emplace("extra", kiln::Value::tensor<float>({1}, {1.0f}));
    expect_status([&] { s.run({}, bad); }, KILN_INVALID_ARGUMENT, "no input named 'extra'");
  }
  expect_status([] { kiln::Value::strings({3}, {"a"}); }, KILN_INVALID_ARGUMENT,
                "1 strings for a tensor of 3");
  expect_status([] { kiln::Value::tensor<float>({2}, {1.0f}); }, KILN_INVALID_ARGUMENT,
                "data_size is 4 bytes but float[2] needs 8");
  std::vector<kiln::Value> out = s.run({"n2"}, feeds);
  expect_status([&] { out[0].data<float>(); }, KILN_INVALID_ARGUMENT, "holds int64, not float");
  expect_status([&] { out[0].sequence_length(); }, KILN_INVALID_ARGUMENT, "not a sequence");
  kiln::Value empty;
  expect_status([&] { empty.dims(); }, KILN_INVALID_ARGUMENT, "'value' is NULL");
  EXPECT_EQ(s.run({"n2"}, feeds)[0].to_vector<int64_t>(), (std::vector<int64_t>{10, -12}));
}

TEST(CppWrapper, EnginesFromMemoryAndSequences) {
  std::ifstream file(model("relu.kiln"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  kiln::Session engine = kiln::Session::from_memory(bytes.data(), bytes.size());
  kiln::IoInfo x = engine.inputs().at(0);
  EXPECT_EQ(x.dims[0].min, 1);
  EXPECT_EQ(x.dims[0].max, 4);
  std::map<std::string, kiln::Value> feeds;
  feeds.emplace("x", kiln::Value::tensor<float>({4, 3}, std::vector<float>(12, -1.0f)));
  EXPECT_EQ(engine.run({}, feeds)[0].to_vector<float>(), std::vector<float>(12, 0.0f));

  kiln::Session seq(model("seq.onnx"));
  feeds.clear();
  feeds.emplace("x", kiln::Value::tensor<float>({4}, {4.0f, 3.0f, 2.0f, 1.0f}));
  std::vector<kiln::Value> out = seq.run({}, feeds);
  ASSERT_EQ(out[0].kind(), KILN_VALUE_SEQUENCE);
  ASSERT_EQ(out[0].sequence_length(), 4u);
  EXPECT_EQ(out[0].sequence_item(3).to_vector<float>(), std::vector<float>{1.0f});
  // A sequence built by the caller.
  kiln::Value a = kiln::Value::tensor<float>({1}, {1.0f});
  kiln::Value b = kiln::Value::tensor<float>({2}, {2.0f, 3.0f});
  kiln::Value made = kiln::Value::sequence({&a, &b});
  EXPECT_EQ(made.sequence_item(1).numel(), 2);
  kiln::Value c = kiln::Value::tensor<int64_t>({1}, {1});
  expect_status(
      [&] {
        kiln::Value::sequence({&a, &c});
      },
      KILN_INVALID_ARGUMENT, "a sequence holds one element type");
}

TEST(CppWrapper, ConcurrentRunsOfOneSessionAgree) {
  kiln::Session s(model("relu.onnx"), kiln::SessionOptions().set_profiling(true));
  constexpr int kThreads = 4;
  constexpr int kRuns = 25;
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        try {
          const int64_t batch = 1 + (t + r) % 4;
          std::vector<float> x(static_cast<size_t>(batch * 3));
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(t * 100 + r) - i;
          std::map<std::string, kiln::Value> feeds;
          feeds.emplace("x", kiln::Value::tensor<float>({batch, 3}, x, KILN_MEMORY_BORROW));
          std::vector<float> y = s.run({}, feeds)[0].to_vector<float>();
          for (size_t i = 0; i < x.size(); ++i) wrong += y[i] != std::max(0.0f, x[i]);
        } catch (const kiln::Exception&) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  std::vector<kiln::ProfileEntry> profile = s.profile();
  ASSERT_EQ(profile.size(), 1u);
  EXPECT_EQ(profile[0].op_type, "Relu");
}

}  // namespace

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(CppWrapper, CompilesTheEngineTheCliWrites) {
  std::string out = model("relu_cpp.kiln");
  kiln::CompileResult r =
      kiln::compile(model("relu.onnx"), out, kiln::CompileOptions().add_shape("x:1..4x3"));
  EXPECT_EQ(r.engine_path, out);
  EXPECT_TRUE(r.gate_ran && r.gate_passed) << r.gate_failure;
  EXPECT_EQ(r.fallback_nodes, 0u);
  EXPECT_NE(r.report.find("precision gate: PASS"), std::string::npos) << r.report;
  std::string engine = file_bytes(out);
  EXPECT_EQ(engine.size(), r.engine_bytes);
  EXPECT_EQ(engine, file_bytes(model("relu.kiln")));  // `kiln compile` wrote it at build time
  kiln::Session s(out);
  EXPECT_EQ(s.input_count(), 1u);
}

TEST(CppWrapper, CompileErrorsAreExceptions) {
  expect_status([] { kiln::compile(model("missing.onnx"), model("x.kiln")); }, KILN_NOT_FOUND,
                "missing.onnx");
  expect_status([] { kiln::CompileOptions().add_shape("x:1..4y3"); }, KILN_INVALID_ARGUMENT,
                "bad dim range '1..4y3'");
  expect_status(
      [] {
        kiln::compile(model("relu.onnx"), model("x.kiln"),
                      kiln::CompileOptions().add_shape("y:1x3"));
      },
      KILN_NOT_FOUND, "no input named 'y'");
}
