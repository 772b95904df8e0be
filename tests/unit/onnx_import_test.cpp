// Import, export and bad-input behaviour of the ONNX front end, on models built in memory.
#include <gtest/gtest.h>

#include <onnx/onnx-ml.pb.h>
#include "expect_error.hpp"

#include <filesystem>
#include <fstream>

#include "onnx/onnx_io.hpp"
#include "runtime/interpreter.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;

void add_tensor_io(onnx::ValueInfoProto* vi, const std::string& name, std::vector<int64_t> dims,
                   const std::string& symbol = "") {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < dims.size(); ++i) {
    auto* d = shape->add_dim();
    if (i == 0 && !symbol.empty())
      d->set_dim_param(symbol);
    else
      d->set_dim_value(dims[i]);
  }
}

// y = x + bias, with bias an initializer; batch dim symbolic.
onnx::ModelProto add_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  add_tensor_io(g->add_input(), "x", {1, 3}, "batch");
  add_tensor_io(g->add_output(), "y", {1, 3}, "batch");
  auto* bias = g->add_initializer();
  bias->set_name("bias");
  bias->set_data_type(onnx::TensorProto::FLOAT);
  bias->add_dims(3);
  for (float v : {1.0f, 2.0f, 3.0f}) bias->add_float_data(v);
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->set_name("add0");
  n->add_input("x");
  n->add_input("bias");
  n->add_output("y");
  return m;
}

std::string bytes_of(const onnx::ModelProto& m) {
  return m.SerializeAsString();
}

TEST(OnnxImport, ImportsRunsAndInfersSymbolicShapes) {
  ir::Model model = onnx_io::import_model_proto(add_model(), {});
  const ir::Value* y = model.graph->outputs()[0];
  ASSERT_TRUE(y->type().shape);
  EXPECT_EQ(y->type().shape->to_string(), "[batch,3]");
  runtime::Interpreter interp(model.graph);
  Tensor x = Tensor::from_vector<float>({2, 3}, {0, 0, 0, 10, 20, 30});
  auto out = interp.run(std::vector<RtValue>{x});
  const float* p = out[0].tensor().data<float>();
  EXPECT_EQ(std::vector<float>(p, p + 6), (std::vector<float>{1, 2, 3, 11, 22, 33}));
}

TEST(OnnxImport, ExportRoundTripKeepsGraphAndNumbers) {
  ir::Model model = onnx_io::import_model_proto(add_model(), {});
  ir::Model again = onnx_io::import_model_proto(onnx_io::export_model(model), {});
  EXPECT_EQ(ir::print_graph(*model.graph), ir::print_graph(*again.graph));
  runtime::Interpreter interp(again.graph);
  auto out = interp.run(std::vector<RtValue>{Tensor::from_vector<float>({1, 3}, {1, 1, 1})});
  EXPECT_EQ(out[0].tensor().data<float>()[2], 4.0f);
}

TEST(OnnxImport, TruncatedOrCorruptBytesAreAClearError) {
  std::string bytes = bytes_of(add_model());
  for (size_t cut : {bytes.size() / 2, bytes.size() - 1, size_t{3}}) {
    expect_error([&] { onnx_io::import_model_bytes(std::string_view(bytes).substr(0, cut), {}); },
                 ErrorCode::InvalidArgument, "");
  }
  expect_error([&] { onnx_io::import_model_bytes("\xff\xff\xff\xff garbage", {}); },
               ErrorCode::InvalidArgument, "not a valid ONNX model");
}

TEST(OnnxImport, MissingInitializerNamesTheNodeAndInput) {
  onnx::ModelProto m = add_model();
  m.mutable_graph()->clear_initializer();
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "node Add 'add0': input 'bias' is not defined");
}

TEST(OnnxImport, UnknownOpImportsButCannotRun) {
  onnx::ModelProto m = add_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("FrobnicateTensor");
  ir::Model model = onnx_io::import_model_proto(m, {});
  expect_error([&] { runtime::Interpreter interp(model.graph); }, ErrorCode::Unsupported,
               "operator FrobnicateTensor (domain ai.onnx) is not implemented");
}

TEST(OnnxImport, UnknownOpsetIsRefused) {
  onnx::ModelProto m = add_model();
  m.mutable_opset_import(0)->set_version(999);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::Unsupported, "opset 999");
  m.mutable_opset_import(0)->set_domain("com.example");
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "node Add 'add0': domain '' is not imported by the model");
}

TEST(OnnxImport, AttributeOfWrongTypeNamesNodeAndAttribute) {
  onnx::ModelProto m = add_model();
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type("Constant");
  n->set_name("c");
  n->add_output("c_out");
  auto* a = n->add_attribute();
  a->set_name("value_int");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(1.5f);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "node Constant 'c': attribute 'value_int' has kind float");
}

TEST(OnnxImport, ShapeContradictingTheGraphIsRefused) {
  onnx::ModelProto m = add_model();
  auto* dims =
      m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  dims->mutable_dim(1)->set_dim_value(4);  // Add of [batch,3] and [3] cannot give [batch,4]
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "graph output 'y': declared float[batch,4] but computed float[batch,3]");
}

TEST(OnnxImport, InitializerWithWrongDataSizeIsRefused) {
  onnx::ModelProto m = add_model();
  m.mutable_graph()->mutable_initializer(0)->add_float_data(4.0f);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "float_data holds 4 values for 3 elements");
}

TEST(OnnxImport, ComplexIsRecognizedAndRefusedClearly) {
  onnx::ModelProto m = add_model();
  m.mutable_graph()->mutable_initializer(0)->set_data_type(onnx::TensorProto::COMPLEX64);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::Unsupported,
               "complex64 is recognized but not supported yet");
}

TEST(OnnxImport, ExternalDataLoadsBesideTheModelAndCannotEscape) {
  fs::path dir = fs::temp_directory_path() / "kiln_external_test";
  fs::create_directories(dir);
  {
    std::ofstream w(dir / "weights.bin", std::ios::binary);
    float pad = 0, v[3] = {5, 6, 7};
    w.write(reinterpret_cast<char*>(&pad), 4);
    w.write(reinterpret_cast<char*>(v), sizeof v);
  }
  onnx::ModelProto m = add_model();
  auto* bias = m.mutable_graph()->mutable_initializer(0);
  bias->clear_float_data();
  bias->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add_kv = [&](const char* k, const char* v) {
    auto* kv = bias->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  };
  add_kv("location", "weights.bin");
  add_kv("offset", "4");
  add_kv("length", "12");
  {
    std::ofstream w(dir / "model.onnx", std::ios::binary);
    m.SerializeToOstream(&w);
  }
  ir::Model model = onnx_io::import_model_file((dir / "model.onnx").string());
  runtime::Interpreter interp(model.graph);
  auto out = interp.run(std::vector<RtValue>{Tensor::from_vector<float>({1, 3}, {0, 0, 0})});
  EXPECT_EQ(out[0].tensor().data<float>()[2], 7.0f);

  bias->mutable_external_data(0)->set_value("../etc/passwd");
  expect_error([&] { onnx_io::import_model_bytes(bytes_of(m), {.base_dir = dir.string()}); },
               ErrorCode::InvalidArgument, "leaves the model directory");
  bias->mutable_external_data(0)->set_value("/etc/passwd");
  expect_error([&] { onnx_io::import_model_bytes(bytes_of(m), {.base_dir = dir.string()}); },
               ErrorCode::InvalidArgument, "must be a relative path");
  fs::create_symlink("/etc", dir / "escape");
  bias->mutable_external_data(0)->set_value("escape/passwd");
  expect_error([&] { onnx_io::import_model_bytes(bytes_of(m), {.base_dir = dir.string()}); },
               ErrorCode::InvalidArgument, "resolves outside");
  fs::remove_all(dir);
}

TEST(OnnxImport, ModelLocalFunctionsAreInlinedWithAttributeDefaults) {
  onnx::ModelProto m = add_model();
  auto* g = m.mutable_graph();
  g->mutable_node(0)->set_op_type("AddConst");
  g->mutable_node(0)->set_domain("local");
  auto* dom = m.add_opset_import();
  dom->set_domain("local");
  dom->set_version(1);
  auto* f = m.add_functions();
  f->set_name("AddConst");
  f->set_domain("local");
  f->add_input("a");
  f->add_input("b");
  f->add_output("out");
  *f->add_opset_import() = m.opset_import(0);
  auto* c = f->add_node();  // k = Constant(value_float = @k); out = a + b + k
  c->set_op_type("Constant");
  c->add_output("k");
  auto* ref = c->add_attribute();
  ref->set_name("value_float");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("k");
  auto* def = f->add_attribute_proto();
  def->set_name("k");
  def->set_type(onnx::AttributeProto::FLOAT);
  def->set_f(100.0f);
  auto* add1 = f->add_node();
  add1->set_op_type("Add");
  add1->add_input("a");
  add1->add_input("b");
  add1->add_output("ab");
  auto* add2 = f->add_node();
  add2->set_op_type("Add");
  add2->add_input("ab");
  add2->add_input("k");
  add2->add_output("out");
  ir::Model model = onnx_io::import_model_proto(m, {});
  runtime::Interpreter interp(model.graph);
  auto out = interp.run(std::vector<RtValue>{Tensor::from_vector<float>({1, 3}, {0, 0, 0})});
  EXPECT_EQ(out[0].tensor().data<float>()[0], 101.0f);

  // A function that calls itself is refused, not a stack overflow.
  add2->set_op_type("AddConst");
  add2->set_domain("local");
  *f->add_opset_import() = *dom;
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "recursive function");
}

TEST(Interpreter, WrongInputShapeOrTypeIsAClearError) {
  ir::Model model = onnx_io::import_model_proto(add_model(), {});
  runtime::Interpreter interp(model.graph);
  expect_error(
      [&] {
        interp.run(std::vector<RtValue>{Tensor::from_vector<float>({2, 4}, std::vector<float>(8))});
      },
      ErrorCode::InvalidArgument, "input 'x': expected shape [batch,3], got [2,4]");
  expect_error(
      [&] {
        interp.run(std::vector<RtValue>{Tensor::from_vector<int64_t>({1, 3}, {1, 2, 3})});
      },
      ErrorCode::InvalidArgument, "expected element type float, got int64");
  expect_error([&] { interp.run(std::vector<RtValue>{}); }, ErrorCode::InvalidArgument,
               "input 'x' was not given");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(OnnxImport, UnsortedNodesAreSortedAndCyclesRefused) {
  onnx::ModelProto m = add_model();
  auto* g = m.mutable_graph();
  g->mutable_node(0)->set_output(0, "t");  // Add -> t, then Identity t -> y, stored reversed
  auto* id = g->add_node();
  id->set_op_type("Identity");
  id->add_input("t");
  id->add_output("y");
  g->mutable_node()->SwapElements(0, 1);
  ir::Model model = onnx_io::import_model_proto(m, {});
  EXPECT_EQ(model.graph->nodes()[0]->op_type(), "Add");
  g->mutable_node(1)->set_input(0, "y");  // Add reads y, Identity reads t: a cycle
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "is part of a cycle");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Inputs the fuzzer once crashed on: each must now import or fail with a kiln::Error.
TEST(OnnxImport, FuzzerRegressionsFailCleanly) {
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests/fuzz/regressions/onnx_import";
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    try {
      onnx_io::import_model_bytes(bytes, {});
    } catch (const Error&) {
    }
    ++count;
  }
  EXPECT_GT(count, 0u);
}

}  // namespace
}  // namespace kiln
