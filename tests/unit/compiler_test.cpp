// The compiler library (src/compiler) called directly: shape specs, the messages and progress it
// reports instead of printing, model bytes, calibration sets and option errors.
#include <gtest/gtest.h>

#include <onnx/onnx-ml.pb.h>
#include "expect_error.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "compiler/compile.hpp"
#include "compiler/option_error.hpp"
#include "compiler/shape_spec.hpp"
#include "runtime/session.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// y = Relu(x), x float[batch, 3].
std::string relu_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto io = [](onnx::ValueInfoProto* vi, const char* name) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(3);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->add_input("x");
  n->add_output("y");
  return m.SerializeAsString();
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / "kiln_compiler_test";
  fs::create_directories(dir);
  return dir / name;
}

TEST(ShapeSpec, ParsesFixedDimsAndRanges) {
  auto [name, shape] = compiler::parse_shape_spec("img:1..8x3x4..4");
  EXPECT_EQ(name, "img");
  ASSERT_EQ(shape.rank(), 3u);
  EXPECT_TRUE(shape.dims()[0].is_symbolic());
  EXPECT_EQ(shape.dims()[0].min(), 1);
  EXPECT_EQ(shape.dims()[0].max(), 8);
  EXPECT_EQ(shape.dims()[1].value(), 3);
  EXPECT_EQ(shape.dims()[2].value(), 4);  // a range of one value is that value
  // The name may hold colons: the dims follow the last one.
  EXPECT_EQ(compiler::parse_shape_spec("a:b:2").first, "a:b");
  expect_error([] { compiler::parse_shape_spec("x"); }, ErrorCode::InvalidArgument,
               "must be NAME:D1xD2x");
  expect_error([] { compiler::parse_shape_spec("x:2xx3"); }, ErrorCode::InvalidArgument,
               "'' is not a number");
  expect_error([] { compiler::parse_shape_spec("x:-1"); }, ErrorCode::InvalidArgument, "bad dim");
}

TEST(CompileModel, ReportsThroughCallbacksFromBytes) {
  compiler::CompileOptions o;
  o.model_bytes = relu_model();
  o.output_path = scratch("relu.kiln").string();
  o.shapes = {"x:1..4x3"};
  std::vector<std::pair<compiler::MessageKind, std::string>> messages;
  o.on_message = [&](compiler::MessageKind k, std::string_view t) {
    messages.emplace_back(k, std::string(t));
  };
  std::vector<std::string> progress;  // "stage done/total" or "stage finished"
  o.on_progress = [&](const compiler::ProgressEvent& e) {
    progress.push_back(std::string(e.stage) +
                       (e.finished ? " finished" : fmt::format(" {}/{}", e.done, e.total)));
  };
  compiler::CompileResult r = compiler::compile_model(o);
  EXPECT_EQ(r.engine_path, o.output_path);
  EXPECT_TRUE(r.gate.ran && r.gate.pass) << r.gate.failure;
  EXPECT_EQ(r.gate.input_sets, 2u);   // both ends of the batch range
  EXPECT_EQ(r.info.source_path, "");  // bytes have no path
  std::string joined;
  for (const auto& [kind, text] : messages) {
    EXPECT_EQ(kind, compiler::MessageKind::Report) << text;
    EXPECT_EQ(text.back(), '\n');
    joined += text;
  }
  EXPECT_EQ(joined, r.report);
  EXPECT_NE(r.report.find("nodes: 1 -> 1\n"), std::string::npos) << r.report;
  // Each long step starts and is finished (a progress bar is erased).
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front(), "optimizing 0/0");
  EXPECT_NE(std::find(progress.begin(), progress.end(), "optimizing finished"), progress.end());
  EXPECT_NE(std::find(progress.begin(), progress.end(), "precision gate 0/2"), progress.end());
  EXPECT_EQ(progress.back(), "precision gate finished");
  Session s(r.engine_path);
  EXPECT_EQ(s.inputs()[0].type.shape->dims()[0].max(), 4);
}

TEST(CompileModel, ChecksOnCalibrationSets) {
  compiler::CompileOptions o;
  o.model_bytes = relu_model();
  o.output_path = scratch("relu_cal.kiln").string();
  Tensor x(DataType::Float32, {5, 3});
  for (int i = 0; i < 15; ++i) x.data<float>()[i] = static_cast<float>(i) - 7;
  o.inputs.calibration = {{{"x", x}}, {{"x", x}}, {{"x", x}}};
  compiler::CompileResult r = compiler::compile_model(o);
  EXPECT_EQ(r.gate.input_sets, 3u);
  EXPECT_EQ(r.gate.source, "3 calibration input sets");
  o.inputs.calibration = {{{"nope", x}}};
  expect_error([&] { compiler::compile_model(o); }, ErrorCode::NotFound,
               "the model has no input named 'nope'");
  EXPECT_FALSE(fs::exists(o.output_path + ".unverified"));
}

TEST(CompileModel, OptionErrorsAreClear) {
  compiler::CompileOptions o;
  expect_error([&] { compiler::compile_model(o); }, ErrorCode::InvalidArgument, "no model");
  o.model_bytes = relu_model();
  expect_error([&] { compiler::compile_model(o); }, ErrorCode::InvalidArgument,
               "give the engine's output path");
  o.output_path = scratch("relu_bad.kiln").string();
  o.inputs.dims = {{"batc", 2}};
  EXPECT_THROW(compiler::compile_model(o), compiler::OptionError);
  o.inputs.dims.clear();
  o.optimize = false;
  o.dump_after = "fold_constants";
  EXPECT_THROW(compiler::compile_model(o), compiler::OptionError);
  o.dump_after.clear();
  o.max_rel_l2 = -1;
  expect_error([&] { compiler::compile_model(o); }, ErrorCode::InvalidArgument, "must be >= 0");
  o.max_rel_l2.reset();
  o.model_bytes.reset();
  o.model_path = scratch("missing.onnx").string();
  expect_error([&] { compiler::compile_model(o); }, ErrorCode::NotFound, "missing.onnx");
  EXPECT_FALSE(fs::exists(o.output_path));
}

}  // namespace
}  // namespace kiln
