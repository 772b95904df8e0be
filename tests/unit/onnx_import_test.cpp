// Import, export and bad-input behaviour of the ONNX front end, on models built in memory.
#include <gtest/gtest.h>

#include <onnx/onnx-ml.pb.h>
#include "expect_error.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "onnx/graph_depth.hpp"
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

// Before IR version 4 every initializer was listed among the inputs: a weight, not an input
// (it folds and fuses, and a GPU uploads it once). From version 4 a listed one may be fed.
TEST(OnnxImport, InitializersListedAsInputsAreWeightsBeforeIrVersion4) {
  for (int64_t ir_version : {3, 4}) {
    onnx::ModelProto m = add_model();
    m.set_ir_version(ir_version);
    add_tensor_io(m.mutable_graph()->add_input(), "bias", {3});
    ir::Model model = onnx_io::import_model_proto(m, {});
    const ir::Graph& g = *model.graph;
    const ir::Value* bias = g.find_local_value("bias");
    ASSERT_NE(bias, nullptr);
    EXPECT_TRUE(bias->is_constant());
    EXPECT_EQ(g.inputs().size(), ir_version < 4 ? 1u : 2u) << "IR version " << ir_version;
    EXPECT_EQ(g.is_input(bias), ir_version >= 4) << "IR version " << ir_version;
    // Written back, the weight is unlisted, so the file says IR version 4 at least, and reads
    // back the same way.
    onnx::ModelProto out = onnx_io::export_model(model);
    EXPECT_GE(out.ir_version(), 4);
    ir::Model again = onnx_io::import_model_proto(out, {});
    EXPECT_EQ(again.graph->inputs().size(), g.inputs().size());
  }
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
               "float_data holds 4 values for float[3] (3 expected)");
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

namespace kiln {
namespace {

// The largest resident set this process has had, in bytes.
size_t peak_rss() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

constexpr size_t kMiB = size_t{1} << 20;

// A directory of its own per test, removed at the end.
class OnnxImportFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("kiln_import_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // add_model() with `bias` (float[3]) stored as external data at `location`.
  onnx::ModelProto external_model(const std::string& location,
                                  std::vector<std::pair<std::string, std::string>> extra = {}) {
    onnx::ModelProto m = add_model();
    auto* bias = m.mutable_graph()->mutable_initializer(0);
    bias->clear_float_data();
    bias->set_data_location(onnx::TensorProto::EXTERNAL);
    extra.insert(extra.begin(), {"location", location});
    for (const auto& [k, v] : extra) {
      auto* kv = bias->add_external_data();
      kv->set_key(k);
      kv->set_value(v);
    }
    return m;
  }
  void import(const onnx::ModelProto& m) {
    onnx_io::import_model_bytes(bytes_of(m), {.base_dir = dir_.string()});
  }
  fs::path dir_;
};

// 73 bytes of model declaring a 1 GiB initializer with no data: refused before the tensor is
// allocated (it used to be allocated and zeroed first, 6.3 GB for a declared 6 GiB).
TEST(OnnxImport, DeclaredSizeWithoutDataIsRefusedBeforeAllocating) {
  onnx::ModelProto m = add_model();
  auto* bias = m.mutable_graph()->mutable_initializer(0);
  bias->clear_float_data();
  bias->clear_dims();
  bias->add_dims(256);
  bias->add_dims(1 << 20);
  const size_t before = peak_rss();
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "initializer 'bias': declares float[256,1048576] (1073741824 bytes) but holds no "
               "data");
  EXPECT_LT(peak_rss() - before, 100 * kMiB);
  // Data of the wrong size is refused the same way, in every field.
  bias->add_float_data(1.0f);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "initializer 'bias': float_data holds 1 values for float[256,1048576]");
  bias->clear_float_data();
  bias->set_raw_data(std::string(16, '\0'));
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "initializer 'bias': 16 bytes of data for float[256,1048576]");
  EXPECT_LT(peak_rss() - before, 100 * kMiB);
}

TEST(OnnxImport, OverflowingAndOverLimitDeclaredSizesAreRefused) {
  onnx::ModelProto m = add_model();
  auto* bias = m.mutable_graph()->mutable_initializer(0);
  bias->clear_dims();
  for (int i = 0; i < 3; ++i) bias->add_dims(int64_t{1} << 31);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "initializer 'bias': element count of float[2147483648,2147483648,2147483648] "
               "overflows");
  bias->clear_dims();
  bias->add_dims(int64_t{1} << 62);  // fits int64, but its bytes do not fit size_t
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "is larger than the tensor limit");
}

// A sparse 4 GiB file holding a float[3]: only the 12 bytes the tensor needs are read (the whole
// file used to be read, 4.2 GB and 13 s); a length that disagrees with the tensor is refused
// before reading.
TEST_F(OnnxImportFiles, ExternalDataReadsOnlyTheTensorsBytes) {
  {
    std::ofstream w(dir_ / "w.bin", std::ios::binary);
    float v[3] = {5, 6, 7};
    w.write(reinterpret_cast<char*>(v), sizeof v);
  }
  fs::resize_file(dir_ / "w.bin", uintmax_t{4} << 30);
  const size_t before = peak_rss();
  const auto start = std::chrono::steady_clock::now();
  ir::Model model =
      onnx_io::import_model_bytes(bytes_of(external_model("w.bin")), {.base_dir = dir_.string()});
  EXPECT_LT(peak_rss() - before, 100 * kMiB);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  runtime::Interpreter interp(model.graph);
  auto out = interp.run(std::vector<RtValue>{Tensor::from_vector<float>({1, 3}, {0, 0, 0})});
  EXPECT_EQ(out[0].tensor().data<float>()[2], 7.0f);

  expect_error(
      [&] {
        import(external_model("w.bin", {{ "length", "4294967296" }}));
      },
      ErrorCode::InvalidArgument,
      "initializer 'bias': external data length 4294967296 in 'w.bin' does not match the "
      "12 bytes the tensor declares");
  expect_error(
      [&] {
        import(external_model("w.bin", {{ "offset", "4294967290" }}));
      },
      ErrorCode::InvalidArgument,
      "initializer 'bias': needs 12 bytes at offset 4294967290 of 'w.bin', which has "
      "4294967296 bytes");
  expect_error(
      [&] {
        import(external_model("w.bin", {{ "offset", "-4" }}));
      },
      ErrorCode::InvalidArgument, "external data offset '-4' is not a non-negative");
  expect_error(
      [&] {
        import(external_model("w.bin", {{ "length", "12abc" }}));
      },
      ErrorCode::InvalidArgument, "external data length '12abc' is not a non-negative");
  fs::resize_file(dir_ / "w.bin", 8);
  expect_error([&] { import(external_model("w.bin")); }, ErrorCode::InvalidArgument,
               "initializer 'bias': needs 12 bytes at offset 0 of 'w.bin', which has 8 bytes");
  EXPECT_LT(peak_rss() - before, 100 * kMiB);
}

// External data must be a regular file: '.' (the model's directory) used to make the reader
// allocate INT64_MAX bytes, and a fifo would block the open forever.
TEST_F(OnnxImportFiles, ExternalDataMustBeARegularFile) {
  expect_error([&] { import(external_model(".")); }, ErrorCode::InvalidArgument,
               "initializer 'bias': external data location '.', '" +
                   fs::weakly_canonical(dir_).string() + "' is a directory, not a regular file");
  fs::create_directory(dir_ / "sub");
  expect_error([&] { import(external_model("sub")); }, ErrorCode::InvalidArgument,
               "is a directory, not a regular file");
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  expect_error([&] { import(external_model("pipe")); }, ErrorCode::InvalidArgument,
               "initializer 'bias': external data location 'pipe', '" +
                   fs::weakly_canonical(dir_ / "pipe").string() +
                   "' is a fifo, not a regular file");
}

TEST_F(OnnxImportFiles, ModelFileMustBeARegularFile) {
  expect_error([&] { onnx_io::import_model_file(dir_.string()); }, ErrorCode::InvalidArgument,
               "is a directory, not a regular file");
  ASSERT_EQ(::mkfifo((dir_ / "model.onnx").c_str(), 0600), 0);
  expect_error([&] { onnx_io::import_model_file((dir_ / "model.onnx").string()); },
               ErrorCode::InvalidArgument, "is a fifo, not a regular file");
}

// paddle2onnx and older exporters write dim_value -1 for a dynamic dim; onnxruntime reads it as
// one, and so does Kiln. Other negative values stay errors.
TEST(OnnxImport, DimValueMinusOneIsADynamicDim) {
  onnx::ModelProto m = add_model();
  auto* g = m.mutable_graph();
  g->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(-1);
  g->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(-1);
  ir::Model model = onnx_io::import_model_proto(m, {});
  const ir::Value* x = model.graph->inputs()[0];
  ASSERT_TRUE(x->type().shape);
  EXPECT_FALSE((*x->type().shape)[0].is_static());
  EXPECT_TRUE((*x->type().shape)[1].is_static());
  runtime::Interpreter interp(model.graph);
  auto out =
      interp.run(std::vector<RtValue>{Tensor::from_vector<float>({2, 3}, {0, 0, 0, 1, 1, 1})});
  EXPECT_EQ(out[0].tensor().dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[0].tensor().data<float>()[5], 4.0f);

  g->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(-2);
  expect_error([&] { onnx_io::import_model_proto(m, {}); }, ErrorCode::InvalidArgument,
               "graph 'g' input 'x': dimension -2 is neither a size nor -1 (dynamic)");
}

// y = If(c) { If(c) { ... { Identity(x) } ... } } nested `depth` levels deep; the else branches
// are Identity(x) too.
onnx::ModelProto nested_if_model(int depth) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  add_tensor_io(g->add_input(), "x", {3});
  auto* c = g->add_input();
  c->set_name("c");
  c->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  c->mutable_type()->mutable_tensor_type()->mutable_shape();
  add_tensor_io(g->add_output(), "y", {3});
  auto identity_body = [](onnx::GraphProto* body, const std::string& out) {
    auto* n = body->add_node();
    n->set_op_type("Identity");
    n->add_input("x");
    n->add_output(out);
    add_tensor_io(body->add_output(), out, {3});
  };
  onnx::GraphProto* level = g;
  for (int i = 0; i < depth; ++i) {
    std::string out = i == 0 ? "y" : fmt::format("y{}", i);
    auto* n = level->add_node();
    n->set_op_type("If");
    n->add_input("c");
    n->add_output(out);
    auto* then_attr = n->add_attribute();
    then_attr->set_name("then_branch");
    then_attr->set_type(onnx::AttributeProto::GRAPH);
    auto* else_attr = n->add_attribute();
    else_attr->set_name("else_branch");
    else_attr->set_type(onnx::AttributeProto::GRAPH);
    else_attr->mutable_g()->set_name(fmt::format("else{}", i));
    identity_body(else_attr->mutable_g(), fmt::format("e{}", i));
    level = then_attr->mutable_g();
    level->set_name(fmt::format("then{}", i));
    if (i + 1 < depth) add_tensor_io(level->add_output(), fmt::format("y{}", i + 1), {3});
  }
  identity_body(level, fmt::format("y{}", depth));
  return m;
}

// Protobuf's default recursion limit (100) refused 60-deep subgraphs as "truncated or corrupt";
// Kiln parses every model within its own limit of 64 levels and names that limit past it.
TEST(OnnxImport, DeepSubgraphsParseUpToKilnsLimitAndAreNamedPastIt) {
  ir::Model model = onnx_io::import_model_bytes(bytes_of(nested_if_model(60)), {});
  runtime::Interpreter interp(model.graph);
  auto out = interp.run(
      std::vector<RtValue>{Tensor::from_vector<float>({3}, {1, 2, 3}), Tensor::scalar<bool>(true)});
  EXPECT_EQ(out[0].tensor().data<float>()[2], 3.0f);
  EXPECT_NO_THROW(onnx_io::import_model_bytes(bytes_of(nested_if_model(64)), {}));
  for (int depth : {65, 70, 200}) {
    expect_error([&] { onnx_io::import_model_bytes(bytes_of(nested_if_model(depth)), {}); },
                 ErrorCode::InvalidArgument, "subgraphs nest deeper than 64 levels");
  }
}

TEST(OnnxImport, SubgraphDepthScansTheWireFormat) {
  EXPECT_EQ(onnx_io::subgraph_depth(bytes_of(add_model()), 64), 0);
  EXPECT_EQ(onnx_io::subgraph_depth(bytes_of(nested_if_model(1)), 64), 1);
  EXPECT_EQ(onnx_io::subgraph_depth(bytes_of(nested_if_model(200)), 1000), 200);
  EXPECT_EQ(onnx_io::subgraph_depth(bytes_of(nested_if_model(200)), 64), 65);  // stops early
  std::string bytes = bytes_of(nested_if_model(10));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {  // any prefix: a bounded answer, no crash
    EXPECT_LE(onnx_io::subgraph_depth(std::string_view(bytes).substr(0, cut), 64), 10);
  }
}

}  // namespace
}  // namespace kiln
