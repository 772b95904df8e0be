// The .kiln engine file: lossless round trips, zero-copy aligned weights, and a clear error for
// every kind of damaged, mismatched or malformed file.
#include <gtest/gtest.h>

#include <onnx/onnx-ml.pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <unistd.h>

#include "engine/engine_file.hpp"
#include "engine/kiln_generated.h"
#include "expect_error.hpp"
#include "onnx/onnx_io.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/model_loader.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using engine::LoadedEngine;

TypeInfo f32(std::vector<Dim> dims) {
  return TypeInfo::tensor(DataType::Float32, Shape(std::move(dims)));
}

ir::Node* add_node(ir::Graph& g, const std::string& op, std::vector<ir::Value*> in,
                   const std::string& out_name, TypeInfo type) {
  ir::Value* out = g.add_value(out_name, std::move(type));
  ir::Node* n = g.add_node(op, "", out_name + "_node", std::move(in), {out});
  n->set_opset(17);
  return n;
}

// y = x + w; z = If(cond, then: y * w, else: y - big[0, :3]) — both bodies capture outer values.
ir::Model runnable_model() {
  ir::Model m;
  m.ir_version = 8;
  m.producer_name = "engine-test";
  m.producer_version = "1.2";
  m.domain = "test.kiln";
  m.doc_string = "round trip";
  m.model_version = 42;
  m.metadata = {{"author", "kiln"}, {"bytes", std::string("a\0b", 3)}};
  m.source_path = "/models/test.onnx";
  m.graph = std::make_shared<ir::Graph>("main");
  ir::Graph& g = *m.graph;
  g.opsets() = {{"", 17}, {"com.example", 1}};
  Dim batch = Dim::symbol("batch", 1, 8);
  ir::Value* x = g.add_input("x", f32({batch, 3}));
  ir::Value* cond = g.add_input("cond", TypeInfo::tensor(DataType::Bool, Shape()));
  ir::Value* w = g.add_initializer("w", Tensor::from_vector<float>({3}, {1.5f, -2.0f, 3.25f}));
  std::mt19937 rng(3);
  std::vector<float> big_values(5 * 7);
  for (float& v : big_values) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  ir::Value* big = g.add_initializer("big", Tensor::from_vector<float>({5, 7}, big_values));
  g.add_initializer("labels",
                    Tensor::from_vector<std::string>({2}, {"cat", std::string("d\0g\xff", 4)}));
  ir::Value* starts = g.add_initializer("starts", Tensor::from_vector<int64_t>({2}, {0, 0}));
  ir::Value* ends = g.add_initializer("ends", Tensor::from_vector<int64_t>({2}, {1, 3}));
  ir::Value* empty = g.add_initializer("empty", Tensor(DataType::Float32, {0, 4}));
  (void)empty;
  ir::Node* add = add_node(g, "Add", {x, w}, "y", f32({batch, 3}));
  ir::Node* slice = add_node(g, "Slice", {big, starts, ends}, "row", f32({1, 3}));

  auto then_g = std::make_shared<ir::Graph>("then_body", &g);
  then_g->opsets() = g.opsets();
  ir::Node* mul = add_node(*then_g, "Mul", {add->output(0), w}, "t", f32({batch, 3}));
  then_g->add_output(mul->output(0));
  auto else_g = std::make_shared<ir::Graph>("else_body", &g);
  else_g->opsets() = g.opsets();
  ir::Node* sub =
      add_node(*else_g, "Sub", {add->output(0), slice->output(0)}, "e", f32({batch, 3}));
  else_g->add_output(sub->output(0));

  ir::Value* z = g.add_value("z", f32({batch, 3}));
  ir::Node* branch = g.add_node("If", "", "branch", {cond}, {z});
  branch->set_opset(17);
  branch->set_attribute("then_branch", ir::GraphPtr(then_g));
  branch->set_attribute("else_branch", ir::GraphPtr(else_g));
  g.add_output(z);
  g.add_output(add->output(0));
  return m;
}

// A node of every attribute kind (it is never run, only stored and read back).
void add_attribute_zoo(ir::Model& m) {
  ir::Graph& g = *m.graph;
  ir::Value* x = g.find_value("x");
  ir::Value* out = g.add_value("zoo_out", TypeInfo{});
  ir::Value* out2 = g.add_value(
      "zoo_out2", TypeInfo::wrap(TypeInfo::Kind::Sequence, f32({Dim::symbol("n"), Dim()})));
  ir::Node* n =
      g.add_node("Zoo", "com.example", "", {x, nullptr, g.find_value("w")}, {out, nullptr, out2});
  n->set_opset(1);
  auto body = [&](const std::string& name) {
    auto sg = std::make_shared<ir::Graph>(name, &g);
    ir::Value* in = sg->add_input("i", f32({2}));
    ir::Node* neg = add_node(*sg, "Neg", {in}, "o", f32({2}));
    sg->add_output(neg->output(0));
    return sg;
  };
  n->set_attribute("f", 0.25f);
  n->set_attribute("f_zero", 0.0f);
  n->set_attribute("i", int64_t{-7});
  n->set_attribute("s", std::string("bytes\0\x80", 7));
  n->set_attribute("t", Tensor::from_vector<int32_t>({2, 2}, {1, 2, 3, 4}));
  n->set_attribute("t_str", Tensor::from_vector<std::string>({1}, {"only"}));
  n->set_attribute("g", ir::GraphPtr(body("g_body")));
  n->set_attribute(
      "tp", TypeInfo::wrap(TypeInfo::Kind::Optional,
                           TypeInfo::tensor(DataType::Int64, Shape({Dim::symbol("len", 2, 9)}))));
  n->set_attribute("tp_unranked", TypeInfo::tensor(DataType::Float16));
  n->set_attribute("floats", std::vector<float>{1.0f, -0.5f});
  n->set_attribute("floats_empty", std::vector<float>{});
  n->set_attribute("ints", std::vector<int64_t>{3, 1, 4});
  n->set_attribute("strings", std::vector<std::string>{"a", "", std::string("\0", 1)});
  n->set_attribute("tensors", std::vector<Tensor>{Tensor::scalar<double>(2.5),
                                                  Tensor::from_vector<uint8_t>({3}, {7, 8, 9})});
  n->set_attribute("graphs", std::vector<ir::GraphPtr>{body("gs0"), body("gs1")});
}

std::string tensor_bytes(const Tensor& t) {
  if (t.dtype() == DataType::String) {
    std::string s;
    for (const std::string& x : t.values<std::string>()) s += std::to_string(x.size()) + ":" + x;
    return s;
  }
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.describe(), b.describe()) << what;
  if (a.defined() && b.defined()) {
    EXPECT_EQ(tensor_bytes(a), tensor_bytes(b)) << what;
  }
}

void expect_same_graph(const ir::Graph& a, const ir::Graph& b);

void expect_same_attribute(const ir::Attribute& a, const ir::Attribute& b, const std::string& n) {
  ASSERT_EQ(a.kind(), b.kind()) << n;
  std::visit(
      [&](const auto& va) {
        using T = std::decay_t<decltype(va)>;
        const T& vb = std::get<T>(b.storage());
        if constexpr (std::is_same_v<T, Tensor>) {
          expect_same_tensor(va, vb, n);
        } else if constexpr (std::is_same_v<T, ir::GraphPtr>) {
          expect_same_graph(*va, *vb);
        } else if constexpr (std::is_same_v<T, TypeInfo>) {
          EXPECT_EQ(va.to_string(), vb.to_string()) << n;
        } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
          ASSERT_EQ(va.size(), vb.size()) << n;
          for (size_t i = 0; i < va.size(); ++i) expect_same_tensor(va[i], vb[i], n);
        } else if constexpr (std::is_same_v<T, std::vector<ir::GraphPtr>>) {
          ASSERT_EQ(va.size(), vb.size()) << n;
          for (size_t i = 0; i < va.size(); ++i) expect_same_graph(*va[i], *vb[i]);
        } else {
          EXPECT_EQ(va, vb) << n;
        }
      },
      a.storage());
}

// Deeper than print_graph: attribute payloads, value types, constants, opsets, node opsets.
void expect_same_graph(const ir::Graph& a, const ir::Graph& b) {
  EXPECT_EQ(ir::print_graph(a), ir::print_graph(b));
  EXPECT_EQ(a.opsets(), b.opsets());
  ASSERT_EQ(a.values().size(), b.values().size()) << a.name();
  for (const auto& va : a.values()) {
    const ir::Value* vb = b.find_local_value(va->name());
    ASSERT_TRUE(vb) << va->name();
    EXPECT_EQ(va->type().to_string(), vb->type().to_string()) << va->name();
    EXPECT_EQ(va->is_constant(), vb->is_constant()) << va->name();
    if (va->is_constant()) expect_same_tensor(va->constant(), vb->constant(), va->name());
  }
  auto na = a.nodes(), nb = b.nodes();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    EXPECT_EQ(na[i]->name(), nb[i]->name());
    EXPECT_EQ(na[i]->domain(), nb[i]->domain());
    EXPECT_EQ(na[i]->opset(), nb[i]->opset());
    ASSERT_EQ(na[i]->attributes().size(), nb[i]->attributes().size());
    for (const auto& [name, attr] : na[i]->attributes()) {
      const ir::Attribute* other = nb[i]->attribute(name);
      ASSERT_TRUE(other) << name;
      expect_same_attribute(attr, *other, name);
    }
  }
}

class EngineFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("kiln_engine_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const ir::Model& m, engine::EngineInfo info = {}) {
    std::string path = (dir_ / "model.kiln").string();
    engine::write_engine(m, info, path);
    return path;
  }
  static std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  std::string rewrite(const std::string& bytes) {
    std::string path = (dir_ / "damaged.kiln").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return path;
  }
  fs::path dir_;
};

std::vector<RtValue> run(const std::shared_ptr<ir::Graph>& g, bool cond) {
  runtime::Interpreter interp(g);
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  return interp.run(std::vector<RtValue>{x, Tensor::scalar<bool>(cond)});
}

TEST_F(EngineFileTest, RoundTripKeepsTheGraphAndTheNumbers) {
  ir::Model m = runnable_model();
  engine::EngineInfo info;
  info.source_hash = 0x0123456789abcdefull;
  LoadedEngine e = engine::read_engine(write(m, info));
  expect_same_graph(*m.graph, *e.model.graph);
  EXPECT_EQ(e.model.ir_version, 8);
  EXPECT_EQ(e.model.producer_name, "engine-test");
  EXPECT_EQ(e.model.producer_version, "1.2");
  EXPECT_EQ(e.model.domain, "test.kiln");
  EXPECT_EQ(e.model.doc_string, "round trip");
  EXPECT_EQ(e.model.model_version, 42);
  EXPECT_EQ(e.model.metadata, m.metadata);
  EXPECT_EQ(e.info.source_path, "/models/test.onnx");
  EXPECT_EQ(e.info.source_hash, 0x0123456789abcdefull);
  EXPECT_EQ(e.info.format_version, engine::kFormatVersion);
  EXPECT_EQ(e.info.kiln_version, KILN_VERSION);
  EXPECT_EQ(e.info.target, engine::Target::cpu_baseline());
  for (bool cond : {true, false}) {
    auto want = run(m.graph, cond), got = run(e.model.graph, cond);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      expect_same_tensor(want[i].tensor(), got[i].tensor(), "output");
    }
  }
}

TEST_F(EngineFileTest, EveryAttributeKindSurvives) {
  ir::Model m = runnable_model();
  add_attribute_zoo(m);
  LoadedEngine e = engine::read_engine(write(m));
  expect_same_graph(*m.graph, *e.model.graph);
  // Captured outer values resolve to the enclosing graph's values, not copies.
  const ir::Node* branch = e.model.graph->nodes()[2];
  ASSERT_EQ(branch->op_type(), "If");
  const auto& then_g = *std::get<ir::GraphPtr>(branch->attribute("then_branch")->storage());
  EXPECT_EQ(then_g.parent(), e.model.graph.get());
  EXPECT_EQ(then_g.nodes()[0]->input(0), e.model.graph->find_local_value("y"));
}

TEST_F(EngineFileTest, WeightsAreAlignedViewsIntoTheMapping) {
  ir::Model m = runnable_model();
  add_attribute_zoo(m);
  LoadedEngine e = engine::read_engine(write(m));
  const auto* begin = static_cast<const unsigned char*>(e.bytes.get());
  const unsigned char* weights = begin + e.weights_offset;
  EXPECT_EQ(e.weights_offset % 64, 0u);
  int views = 0;
  auto check = [&](const Tensor& t, const std::string& what) {
    if (t.dtype() == DataType::String || t.nbytes() == 0) return;
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << what;
    EXPECT_TRUE(p >= weights && p + t.nbytes() <= begin + e.size) << what << " is not in the file";
    ++views;
  };
  for (const auto& v : e.model.graph->values()) {
    if (v->is_constant()) check(v->constant(), v->name());
  }
  const ir::Node* zoo = e.model.graph->nodes().back();
  check(std::get<Tensor>(zoo->attribute("t")->storage()), "attribute t");
  EXPECT_EQ(views, 5);  // w, big, starts, ends, attribute t
  // The mapping outlives the LoadedEngine while a tensor still uses it.
  Tensor w = e.model.graph->find_local_value("w")->constant();
  e = LoadedEngine{};
  EXPECT_EQ(w.data<float>()[2], 3.25f);
}

TEST_F(EngineFileTest, ChecksumCatchesAFlippedByteAnywhere) {
  std::string path = write(runnable_model());
  std::string bytes = slurp(path);
  LoadedEngine e = engine::read_engine(path);
  for (size_t at : {size_t{64 + 40}, e.weights_offset + 3, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 0x20;
    expect_error([&] { engine::read_engine(rewrite(bad)); }, ErrorCode::InvalidArgument,
                 "corrupt engine file: checksum mismatch");
  }
  // Without the checksum a flipped weight byte goes unnoticed: that is what the flag means.
  std::string bad = bytes;
  bad[e.weights_offset] ^= 0x01;
  engine::ReadOptions no_sum;
  no_sum.verify_checksum = false;
  EXPECT_NO_THROW(engine::read_engine_bytes(bad, no_sum));
}

TEST_F(EngineFileTest, TruncatedFilesAreRefused) {
  std::string bytes = slurp(write(runnable_model()));
  for (size_t cut : {bytes.size() - 1, bytes.size() / 2, size_t{100}}) {
    expect_error([&] { engine::read_engine(rewrite(bytes.substr(0, cut))); },
                 ErrorCode::InvalidArgument, "truncated engine file");
  }
  expect_error([&] { engine::read_engine(rewrite(bytes.substr(0, 20))); },
               ErrorCode::InvalidArgument, "shorter than its header");
  expect_error([&] { engine::read_engine(rewrite("")); }, ErrorCode::InvalidArgument, "empty file");
  expect_error([&] { engine::read_engine(rewrite(bytes + "x")); }, ErrorCode::InvalidArgument,
               "1 bytes after the weights section");
}

TEST_F(EngineFileTest, WrongMagicVersionAndHeaderFields) {
  std::string bytes = slurp(write(runnable_model()));
  std::string bad = bytes;
  bad[0] = 'X';
  expect_error([&] { engine::read_engine(rewrite(bad)); }, ErrorCode::InvalidArgument,
               "not a Kiln engine file");
  bad = bytes;
  uint32_t version = engine::kFormatVersion + 1;
  std::memcpy(bad.data() + 8, &version, 4);
  expect_error([&] { engine::read_engine(rewrite(bad)); }, ErrorCode::Unsupported,
               fmt::format("engine file format version {}, this Kiln reads {} to {}: recompile the "
                           "model",
                           version, engine::kOldestFormatVersion, engine::kFormatVersion));
  bad = bytes;
  uint64_t weights_offset;
  std::memcpy(&weights_offset, bad.data() + 32, 8);
  weights_offset += 8;
  std::memcpy(bad.data() + 32, &weights_offset, 8);
  expect_error([&] { engine::read_engine(rewrite(bad)); }, ErrorCode::InvalidArgument,
               "is misaligned");
  bad = bytes;
  uint64_t huge = ~uint64_t{0} - 8;
  std::memcpy(bad.data() + 24, &huge, 8);  // flatbuffer size
  expect_error([&] { engine::read_engine(rewrite(bad)); }, ErrorCode::InvalidArgument,
               "flatbuffer section");
  std::memcpy(bad.data() + 24, bytes.data() + 24, 8);
  std::memcpy(bad.data() + 40, &huge, 8);  // weights size: the end wraps around
  expect_error([&] { engine::read_engine(rewrite(bad)); }, ErrorCode::InvalidArgument,
               "truncated engine file");
}

// An engine whose magic alone is damaged is still told apart from ONNX by its header, whatever
// its name, and refused as a bad engine (it used to be read as ONNX: "protobuf is truncated or
// corrupt"). A .kiln file that is neither names its engine problem first.
TEST_F(EngineFileTest, DamagedMagicIsNamedAsSuch) {
  std::string bytes = slurp(write(runnable_model()));
  std::string bad = bytes;
  bad[0] = 'X';
  bad[7] = '\x01';
  const std::string want = "not a Kiln engine file (bad magic 'XILNENG\\x01', expected 'KILNENG1')";
  EXPECT_TRUE(engine::has_engine_layout(bad));
  EXPECT_FALSE(engine::has_engine_magic(bad));
  std::string path = rewrite(bad);
  expect_error([&] { runtime::load_model(path); }, ErrorCode::InvalidArgument, path + ": " + want);
  std::string as_onnx = (dir_ / "damaged.onnx").string();
  fs::rename(path, as_onnx);
  expect_error([&] { runtime::load_model(as_onnx); }, ErrorCode::InvalidArgument, want);
  expect_error([&] { runtime::load_model_bytes(bad); }, ErrorCode::InvalidArgument, want);

  std::string garbage = rewrite(std::string("\xff\xff\xff\xff not an engine at all"));
  expect_error([&] { runtime::load_model(garbage); }, ErrorCode::InvalidArgument,
               garbage +
                   ": not a Kiln engine file (bad magic '\\xff\\xff\\xff\\xff not', expected "
                   "'KILNENG1'); read as ONNX instead: not a valid ONNX model");
  std::string short_file = rewrite("KIL");
  expect_error([&] { runtime::load_model(short_file); }, ErrorCode::InvalidArgument,
               "not a Kiln engine file (3 bytes, shorter than the 'KILNENG1' magic)");
  // The header's layout alone never claims an ONNX model.
  EXPECT_FALSE(
      engine::looks_like_engine(onnx_io::export_model(runnable_model()).SerializeAsString()));
}

TEST_F(EngineFileTest, TargetMismatchIsRefused) {
  ir::Model m = runnable_model();
  engine::EngineInfo gpu;
  gpu.target = engine::Target::parse("gfx90a");
  expect_error([&] { engine::read_engine(write(m, gpu)); }, ErrorCode::Unsupported,
               "engine compiled for target 'gfx90a' cannot run on this machine");
  engine::EngineInfo future;
  future.target = engine::Target::parse("cpu:x86-64,avx1024");
  std::string path = write(m, future);
  engine::ReadOptions options;
  options.host = engine::Target::parse("cpu:x86-64,avx2");
  expect_error([&] { engine::read_engine(path, options); }, ErrorCode::Unsupported,
               "'cpu:avx1024,x86-64' cannot run on this machine ('cpu:avx2,x86-64')");
  options.host = engine::Target::parse("cpu:avx1024,avx2,x86-64");
  EXPECT_NO_THROW(engine::read_engine(path, options));
  options.check_target = false;
  options.host.reset();
  EXPECT_NO_THROW(engine::read_engine(path, options));
}

TEST(EngineTarget, ParsesPrintsAndCompares) {
  engine::Target t = engine::Target::parse("cpu:avx2,x86-64,avx2");
  EXPECT_EQ(t.to_string(), "cpu:avx2,x86-64");
  EXPECT_TRUE(engine::Target::cpu_baseline().runs_on(engine::Target::host()));
  EXPECT_FALSE(engine::Target::parse("gfx90a").runs_on(engine::Target::parse("gfx942")));
  for (const char* bad : {"", ":avx2", "cpu:", "cpu:avx2,", "CPU", "cpu:a b"}) {
    expect_error([&] { engine::Target::parse(bad); }, ErrorCode::InvalidArgument, "target");
  }
}

TEST(EngineHash, IsStableAndSensitive) {
  std::string a(1000, 'a');
  uint64_t h = engine::hash_bytes(a.data(), a.size());
  // Streaming in odd pieces gives the one-shot result.
  engine::Hasher s;
  for (size_t at = 0; at < a.size(); at += 7)
    s.update(a.data() + at, std::min<size_t>(7, a.size() - at));
  EXPECT_EQ(s.finish(), h);
  std::string b = a;
  b[500] = 'b';
  EXPECT_NE(engine::hash_bytes(b.data(), b.size()), h);
  EXPECT_NE(engine::hash_bytes(a.data(), a.size() - 1), h);
  std::string zeros(16, '\0');
  EXPECT_NE(engine::hash_bytes(zeros.data(), 15), engine::hash_bytes(zeros.data(), 16));
}

// Every single-byte change of the description, with the checksum off, loads or is a clean
// kiln::Error: the structural checks alone keep the reader safe.
TEST_F(EngineFileTest, EveryFlippedDescriptionByteIsHandled) {
  ir::Model m = runnable_model();
  add_attribute_zoo(m);
  std::string path = write(m);
  std::string bytes = slurp(path);
  LoadedEngine e = engine::read_engine(path);
  engine::ReadOptions options;
  options.verify_checksum = false;
  int errors = 0;
  for (size_t at = 0; at < e.weights_offset; ++at) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ mask);
      try {
        LoadedEngine loaded = engine::read_engine_bytes(bad, options);
        (void)ir::print_graph(*loaded.model.graph);
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 0);
}

// Hand-made descriptions, checksummed correctly, for the checks the writer never trips.
class CraftedEngine {
 public:
  flatbuffers::FlatBufferBuilder fbb;
  std::string weights = std::string(128, '\0');

  // One graph: input x float[2], initializer w, node `op`(x, `input`) -> y, output y.
  std::string build(flatbuffers::Offset<fb::Tensor> w, const std::string& input = "w",
                    int32_t x_dtype = 1, fb::AttrKind attr_kind = fb::AttrKind::Int) {
    auto s = [&](const std::string& v) { return fbb.CreateString(v); };
    auto type = fb::CreateType(
        fbb, fb::TypeKind::Tensor, x_dtype, true,
        fbb.CreateVector(std::vector<flatbuffers::Offset<fb::Dim>>{fb::CreateDim(fbb, 2)}));
    std::vector<flatbuffers::Offset<fb::Value>> values = {fb::CreateValue(fbb, s("x"), type),
                                                          fb::CreateValue(fbb, s("w"), 0, w),
                                                          fb::CreateValue(fbb, s("y"))};
    auto names = [&](std::vector<std::string> ns) {
      std::vector<flatbuffers::Offset<flatbuffers::String>> out;
      for (auto& n : ns) out.push_back(s(n));
      return fbb.CreateVector(out);
    };
    auto attr = fb::CreateAttribute(fbb, s("a"), attr_kind, 0, 1);
    auto node = fb::CreateNode(fbb, s("Add"), s(""), s("add"), 17, names({"x", input}),
                               names({"y"}), fbb.CreateVector(std::vector{attr}));
    auto opset = fb::CreateOpsetEntry(fbb, s(""), 17);
    auto graph = fb::CreateGraph(fbb, s("g"), fbb.CreateVector(std::vector{opset}),
                                 fbb.CreateVector(values), names({"x"}), names({"w"}), names({"y"}),
                                 fbb.CreateVector(std::vector{node}));
    engine::Target host = engine::Target::cpu_baseline();
    std::vector<flatbuffers::Offset<flatbuffers::String>> features;
    for (auto& f : host.features) features.push_back(s(f));
    auto target = fb::CreateTarget(fbb, s(host.device), fbb.CreateVector(features));
    auto model = fb::CreateModel(fbb, engine::kFormatVersion, s("test"), target, 0, 8, 0, 0, 0, 0,
                                 0, 0, 0, graph);
    fb::FinishModelBuffer(fbb, model);

    std::string body(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
    body.resize((64 + body.size() + 63) / 64 * 64 - 64, '\0');
    uint64_t header[8] = {};
    std::memcpy(header, engine::kMagic, 8);
    uint32_t version_and_size[2] = {engine::kFormatVersion, 64};
    std::memcpy(&header[1], version_and_size, 8);
    header[2] = 64;
    header[3] = fbb.GetSize();
    header[4] = 64 + body.size();
    header[5] = weights.size();
    std::string rest = body + weights;
    header[6] = engine::hash_bytes(rest.data(), rest.size());
    return std::string(reinterpret_cast<const char*>(header), sizeof header) + rest;
  }
  flatbuffers::Offset<fb::Tensor> tensor(int32_t dtype, std::vector<int64_t> dims, uint64_t offset,
                                         uint64_t size) {
    return fb::CreateTensor(fbb, dtype, fbb.CreateVector(dims), offset, size);
  }
};

TEST(EngineCrafted, WellFormedFileLoads) {
  CraftedEngine c;
  LoadedEngine e = engine::read_engine_bytes(c.build(c.tensor(1, {2}, 64, 8)));
  EXPECT_EQ(e.model.graph->find_local_value("w")->constant().describe(), "float[2]");
}

TEST(EngineCrafted, BadTensorsAndNamesAreClearErrors) {
  struct Case {
    std::function<std::string(CraftedEngine&)> make;
    ErrorCode code;
    std::string needle;
  };
  std::vector<Case> cases = {
      {[](CraftedEngine& c) { return c.build(c.tensor(1, {3}, 64, 8)); },
       ErrorCode::InvalidArgument, "float[3] needs 12 bytes but the file gives 8"},
      {[](CraftedEngine& c) { return c.build(c.tensor(1, {2}, 32, 8)); },
       ErrorCode::InvalidArgument, "weights at offset 32 are not 64-byte aligned"},
      {[](CraftedEngine& c) { return c.build(c.tensor(1, {2}, 128, 8)); },
       ErrorCode::InvalidArgument, "lie outside the weights section (128 bytes)"},
      {[](CraftedEngine& c) { return c.build(c.tensor(1, {-2}, 64, 8)); },
       ErrorCode::InvalidArgument, "tensor dims [-2]"},
      {[](CraftedEngine& c) { return c.build(c.tensor(99, {2}, 64, 8)); },
       ErrorCode::InvalidArgument, "bad dtype code 99"},
      {[](CraftedEngine& c) {
         c.weights[65] = 2;
         return c.build(c.tensor(9, {2}, 64, 2));
       },
       ErrorCode::InvalidArgument, "bool tensor holds a byte other than 0 or 1"},
      {[](CraftedEngine& c) { return c.build(c.tensor(14, {2}, 64, 16)); },
       ErrorCode::InvalidArgument, "unsupported element type complex64"},
      {[](CraftedEngine& c) { return c.build(c.tensor(1, {2}, 64, 8), "v"); },
       ErrorCode::InvalidArgument,
       "names value 'v', which is not defined in graph 'g' or its enclosing graphs"},
      {[](CraftedEngine& c) { return c.build(c.tensor(1, {2}, 64, 8), "w", -3); },
       ErrorCode::InvalidArgument, "value 'x': bad dtype code -3"},
      {[](CraftedEngine& c) {
         return c.build(c.tensor(1, {2}, 64, 8), "w", 1, static_cast<fb::AttrKind>(42));
       },
       ErrorCode::InvalidArgument, "unknown attribute kind 42"},
  };
  for (auto& c : cases) {
    CraftedEngine engine;
    std::string bytes = c.make(engine);
    expect_error([&] { engine::read_engine_bytes(bytes); }, c.code, c.needle);
  }
}

}  // namespace
}  // namespace kiln
