// kiln::Session: opening ONNX models and engines, feeds checked against declared inputs.
#include "runtime/session.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/engine_file.hpp"
#include "expect_error.hpp"
#include "onnx/onnx_io.hpp"

namespace kiln {
namespace {

// y = Relu(x + x) with x: float[batch 1..4, 3].
ir::Model relu_double_model() {
  auto g = std::make_shared<ir::Graph>();
  g->opsets()[""] = 17;
  ir::Value* x = g->add_input(
      "x", TypeInfo::tensor(DataType::Float32, Shape({Dim::symbol("batch", 1, 4), Dim(3)})));
  TypeInfo out_type = x->type();
  ir::Value* sum = g->add_value("sum", out_type);
  g->add_node("Add", "", "", {x, x}, {sum})->set_opset(17);
  ir::Value* y = g->add_value("y", out_type);
  g->add_node("Relu", "", "", {sum}, {y})->set_opset(17);
  g->add_output(y);
  ir::Model m;
  m.graph = g;
  m.ir_version = 8;
  return m;
}

Tensor batch_of(int64_t batch) {
  std::vector<float> v(static_cast<size_t>(batch * 3));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 2.5f;
  return Tensor::from_vector<float>({batch, 3}, v);
}

TEST(Session, RunsNamedFeedsAndReturnsAskedOutputs) {
  Session s(relu_double_model());
  ASSERT_EQ(s.inputs().size(), 1u);
  EXPECT_EQ(s.inputs()[0].name, "x");
  EXPECT_EQ(s.outputs()[0].name, "y");
  auto out = s.run({"y"}, {{"x", batch_of(2)}});
  ASSERT_EQ(out.size(), 1u);
  auto y = out[0].tensor().values<float>();
  ASSERT_EQ(y.size(), 6u);
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_FLOAT_EQ(y[i], std::max(0.0f, 2 * (static_cast<float>(i) - 2.5f)));
}

TEST(Session, RefusesBadFeedsWithClearErrors) {
  Session s(relu_double_model());
  expect_error(
      [&] {
        s.run({"y"}, {{"x", batch_of(5)}});
      },
      ErrorCode::InvalidArgument, "outside the declared range");
  expect_error(
      [&] {
        s.run({}, {{"x", batch_of(1)}, {"z", batch_of(1)}});
      },
      ErrorCode::InvalidArgument, "no input named 'z'");
  expect_error([&] { s.run({}, {}); }, ErrorCode::InvalidArgument, "'x' was not given");
  expect_error(
      [&] {
        s.run({"w"}, {{"x", batch_of(1)}});
      },
      ErrorCode::NotFound, "no output named 'w'");
  // The session stays usable after each refusal.
  EXPECT_EQ(s.run({}, {{"x", batch_of(4)}})[0].tensor().dim(0), 4);
}

TEST(Session, OpensOnnxAndEngineFilesAlike) {
  auto dir = std::filesystem::temp_directory_path() / "kiln_session_test";
  std::filesystem::create_directories(dir);
  onnx_io::save_model_file(relu_double_model(), (dir / "m.onnx").string());
  engine::write_engine(relu_double_model(), {}, (dir / "m.kiln").string());
  Session from_onnx((dir / "m.onnx").string());
  Session from_engine((dir / "m.kiln").string());
  EXPECT_FALSE(from_onnx.engine_info().has_value());
  EXPECT_TRUE(from_engine.engine_info().has_value());
  Tensor a = from_onnx.run({{"x", batch_of(3)}}).at("y").tensor();
  Tensor b = from_engine.run({{"x", batch_of(3)}}).at("y").tensor();
  auto av = a.values<float>(), bv = b.values<float>();
  EXPECT_EQ(std::vector<float>(av.begin(), av.end()), std::vector<float>(bv.begin(), bv.end()));
  std::filesystem::remove_all(dir);
}

// From bytes, through the same loader a path takes: an engine keeps its stamp.
TEST(Session, OpensModelsFromBytes) {
  auto dir = std::filesystem::temp_directory_path() / "kiln_session_bytes_test";
  std::filesystem::create_directories(dir);
  onnx_io::save_model_file(relu_double_model(), (dir / "m.onnx").string());
  engine::write_engine(relu_double_model(), {}, (dir / "m.kiln").string());
  auto read = [&](const char* name) {
    std::ifstream f(dir / name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  Session from_onnx(runtime::load_model_bytes(read("m.onnx")));
  Session from_engine(runtime::load_model_bytes(read("m.kiln")));
  EXPECT_FALSE(from_onnx.engine_info().has_value());
  EXPECT_TRUE(from_engine.engine_info().has_value());
  Tensor a = from_engine.run({{"x", batch_of(2)}}).at("y").tensor();
  Tensor b = from_onnx.run({{"x", batch_of(2)}}).at("y").tensor();
  auto y = a.values<float>(), want = b.values<float>();
  EXPECT_EQ(std::vector<float>(y.begin(), y.end()), std::vector<float>(want.begin(), want.end()));
  expect_error([] { runtime::load_model_bytes(""); }, ErrorCode::InvalidArgument,
               "buffer is empty");
  std::filesystem::remove_all(dir);
}

TEST(Session, RefusesUnknownDevice) {
  SessionOptions o;
  o.device = "rocm:0";
  expect_error([&] { Session s(relu_double_model(), o); }, ErrorCode::Unsupported,
               "device 'rocm:0'");
}

}  // namespace
}  // namespace kiln
