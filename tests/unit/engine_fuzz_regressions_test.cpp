// Engine files the fuzzer once crashed on, and the shape guards its finding led to: each input
// must read (or fail) with a kiln::Error and build a Session (or fail) the same way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/engine_file.hpp"
#include "expect_error.hpp"
#include "graph_builder.hpp"
#include "runtime/session.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(EngineFuzzRegressions, ReadAndOpenFailCleanly) {
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests/fuzz/regressions/engine_reader";
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    engine::ReadOptions options;
    options.verify_checksum = false;  // as the fuzzer reads them
    options.check_target = false;
    try {
      engine::LoadedEngine e = engine::read_engine_bytes(bytes, options);
      runtime::LoadedModel loaded;
      loaded.model = std::move(e.model);
      loaded.plan = std::move(e.plan);
      Session session(std::move(loaded), SessionOptions{.threads = 1});
    } catch (const Error&) {
    }
    ++count;
  }
  EXPECT_GT(count, 0u);
}

// A declared shape no tensor can have is not handed to oneDNN at open (its size arithmetic
// overflows): the session opens, and the feed check refuses inputs that do not match it.
TEST(EngineFuzzRegressions, HugeDeclaredShapeOpensAndRefusesFeeds) {
  testing::GraphBuilder b(17);
  ir::Value* x = b.input("x", {Dim(int64_t{38654704548}), Dim(8), Dim(4), Dim(4)});
  ir::Value* y =
      b.op("MaxPool", {x}, {{"kernel_shape", ir::Attribute(std::vector<int64_t>{2, 2})}});
  b.graph->add_output(y);
  ir::Model model;
  model.graph = b.graph;
  model.ir_version = 8;
  Session session(std::move(model), SessionOptions{.threads = 1});
  expect_error(
      [&] {
        session.run({y->name()},
                    {{"x", Tensor::from_vector<float>({1, 8, 4, 4}, std::vector<float>(128))}});
      },
      ErrorCode::InvalidArgument, "x");
}

// Padding that makes the output larger than any tensor: the run is refused by name, before
// oneDNN builds a primitive for it.
TEST(EngineFuzzRegressions, ConvOutputPastTheTensorLimitIsRefused) {
  testing::GraphBuilder b(17);
  ir::Value* x = b.input("x", {Dim(1), Dim(1), Dim(4), Dim(4)});
  ir::Value* w = b.random({1, 1, 1, 1});
  const int64_t pad = int64_t{1} << 30;  // the largest the window checks allow
  ir::Value* y =
      b.op("Conv", {x, w}, {{"pads", ir::Attribute(std::vector<int64_t>{0, 0, pad, pad})}});
  b.graph->add_output(y);
  ir::Model model;
  model.graph = b.graph;
  model.ir_version = 8;
  // Refused when the session opens or at the latest when it runs, never inside oneDNN.
  expect_error(
      [&] {
        Session session(std::move(model), SessionOptions{.threads = 1});
        session.run({y->name()},
                    {{"x", Tensor::from_vector<float>({1, 1, 4, 4}, std::vector<float>(16))}});
      },
      ErrorCode::InvalidArgument, "tensor size limit");
}

}  // namespace
}  // namespace kiln
