// The fused ops through the whole path: the default pipeline writes them, the engine file and the
// ONNX exporter carry them (string and float attributes, the ai.kiln opset import), and their
// reference kernels give the unfused results; bad inputs are clear errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <onnx/onnx-ml.pb.h>

#include "engine/engine_file.hpp"
#include "expect_error.hpp"
#include "graph_builder.hpp"
#include "onnx/onnx_io.hpp"
#include "ops/fused_activation.hpp"
#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"
#include "transformer_patterns.hpp"

namespace kiln {
namespace {

using testing::GraphBuilder;
using testing::ops_of;

const std::map<std::string, int64_t> kDims = {{"batch", 2}, {"seq", 5}};

// A CNN head and a transformer encoder layer side by side, opset 13.
std::shared_ptr<ir::Graph> mixed_model() {
  GraphBuilder b(13);
  ir::Value* image = b.input("image", {Dim::symbol("batch"), 3, 6, 6});
  ir::Value* c = b.op("Conv", {image, b.random({4, 3, 3, 3}), b.random({4})},
                      {{"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
  c = b.op("Clip", {c, b.scalar(0.0f), b.scalar(6.0f)});
  ir::Value* flat = b.op("Flatten", {b.op("GlobalAveragePool", {c})});
  ir::Value* fc = b.op("Gemm", {flat, b.random({5, 4}), b.random({5})},
                       {{"transB", ir::Attribute(int64_t{1})}});
  b.output(b.op("LeakyRelu", {fc}, {{"alpha", ir::Attribute(0.2f)}}));

  ir::Value* x = b.input("x", {Dim::symbol("batch"), Dim::symbol("seq"), 8});
  ir::Value* mask = b.input("mask", {Dim::symbol("batch"), 1, 1, Dim::symbol("seq")});
  b.output(testing::encoder_layer(b, x, mask, 8, 2));
  return b.graph;
}

std::shared_ptr<ir::Graph> optimized(std::shared_ptr<ir::Graph> g) {
  passes::PassManager pm;
  passes::add_default_passes(pm);
  pm.run(*g);
  return g;
}

size_t count(const std::map<std::string, size_t>& hist) {
  size_t n = 0;
  for (const auto& [op, k] : hist) n += k;
  return n;
}

TEST(FusedOps, DefaultPipelineFusesAnEncoderLayerAndACnnHead) {
  auto reference = mixed_model();
  auto g = optimized(mixed_model());
  std::map<std::string, size_t> hist = ops_of(*g);
  EXPECT_EQ(hist["ai.kiln.FusedConv"], 1u);
  EXPECT_EQ(hist["ai.kiln.FusedGemm"], 1u);
  EXPECT_EQ(hist["ai.kiln.ScaledDotProductAttention"], 1u);
  EXPECT_EQ(hist["ai.kiln.SkipLayerNormalization"], 2u);
  EXPECT_EQ(hist["ai.kiln.FusedMatMul"], 4u);  // Q, K, V projections and the Gelu layer
  EXPECT_EQ(hist.count("Softmax") + hist.count("ReduceMean") + hist.count("Erf"), 0u);
  // Two Transposes stay: K's is folded into its head split, Q's and V's split heads.
  EXPECT_EQ(hist["Transpose"], 4u);
  std::cout << "mixed model: " << count(ops_of(*reference)) << " -> " << count(hist) << " nodes\n";
  EXPECT_LT(count(hist), count(ops_of(*reference)) / 2);
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    auto feeds = testing::random_feeds(*reference, seed, kDims);
    testing::expect_same_values(testing::run_graph(g, feeds), testing::run_graph(reference, feeds),
                                1e-4, 1e-5);
  }
}

TEST(FusedOps, SurviveTheEngineFileAndTheOnnxExporter) {
  auto reference = mixed_model();
  ir::Model m;
  m.ir_version = 8;
  m.graph = optimized(mixed_model());
  auto feeds = testing::random_feeds(*reference, 7, kDims);
  const std::vector<RtValue> expected = testing::run_graph(reference, feeds);

  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_fused_ops_test.kiln").string();
  engine::write_engine(m, {}, path);
  engine::LoadedEngine e = engine::read_engine(path);
  std::filesystem::remove(path);
  EXPECT_EQ(ir::print_graph(*e.model.graph), ir::print_graph(*m.graph));
  testing::expect_same_values(testing::run_graph(e.model.graph, feeds), expected, 1e-4, 1e-5);

  onnx::ModelProto proto = onnx_io::export_model(m);
  bool imports_kiln = false;
  for (const auto& o : proto.opset_import()) {
    imports_kiln |= o.domain() == ops::kKilnDomain && o.version() == 1;
  }
  EXPECT_TRUE(imports_kiln);
  ir::Model back = onnx_io::import_model_bytes(proto.SerializeAsString(), {});
  EXPECT_EQ(ops_of(*back.graph), ops_of(*m.graph));
  testing::expect_same_values(testing::run_graph(back.graph, feeds), expected, 1e-4, 1e-5);
}

// Gelu and LayerNorm on their own (not absorbed by a neighbour), and a pre-norm residual whose
// sum is read after the norm (SkipLayerNormalization with its optional outputs 1-2 left empty).
std::shared_ptr<ir::Graph> norm_and_gelu_model(int opset) {
  GraphBuilder b(opset);
  const testing::LayerNormForm form = {.axes_input = opset >= 18};
  ir::Value* x = b.input("x", {Dim::symbol("batch"), Dim::symbol("seq"), 8});
  ir::Value* skip = b.input("skip", {Dim::symbol("batch"), Dim::symbol("seq"), 8});
  b.output(testing::erf_gelu(b, x));
  b.output(testing::tanh_gelu(b, skip));
  b.output(testing::decomposed_layer_norm(b, skip, 8, form));
  ir::Value* sum = b.op("Add", {x, skip});
  ir::Value* normed = testing::decomposed_layer_norm(b, sum, 8, form);
  b.output(b.op("Add", {sum, b.op("Sigmoid", {normed})}));
  return b.graph;
}

TEST(FusedOps, StandardOrKilnNormAndGeluByOpsetThroughEngineAndExport) {
  for (int opset : {13, 17, 20}) {
    SCOPED_TRACE(::testing::Message() << "opset " << opset);
    auto reference = norm_and_gelu_model(opset);
    ir::Model m;
    m.ir_version = 8;
    m.graph = optimized(norm_and_gelu_model(opset));
    std::map<std::string, size_t> want = {
        {"Sigmoid", 1}, {"Add", 1}, {"ai.kiln.SkipLayerNormalization", 1}};
    want[opset >= 17 ? "LayerNormalization" : "ai.kiln.LayerNormalization"] = 1;
    want[opset >= 20 ? "Gelu" : "ai.kiln.Gelu"] = 2;
    EXPECT_EQ(ops_of(*m.graph), want);
    for (const ir::Node* n : m.graph->nodes()) {
      if (n->op_type() == "SkipLayerNormalization") {
        ASSERT_EQ(n->outputs().size(), 4u);
        EXPECT_TRUE(!n->output(1) && !n->output(2) && n->output(3));
      }
    }
    auto feeds = testing::random_feeds(*reference, 3, kDims);
    const std::vector<RtValue> expected = testing::run_graph(reference, feeds);
    testing::expect_same_values(testing::run_graph(m.graph, feeds), expected, 1e-4, 1e-5);

    engine::LoadedEngine e = engine::read_engine_bytes([&] {
      const std::string path =
          (std::filesystem::temp_directory_path() / "kiln_norm_gelu_test.kiln").string();
      engine::write_engine(m, {}, path);
      std::ifstream in(path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), {});
      std::filesystem::remove(path);
      return bytes;
    }());
    EXPECT_EQ(ir::print_graph(*e.model.graph), ir::print_graph(*m.graph));
    testing::expect_same_values(testing::run_graph(e.model.graph, feeds), expected, 1e-4, 1e-5);

    ir::Model back = onnx_io::import_model_bytes(onnx_io::export_model(m).SerializeAsString(), {});
    EXPECT_EQ(ops_of(*back.graph), want);
    testing::expect_same_values(testing::run_graph(back.graph, feeds), expected, 1e-4, 1e-5);
  }
}

TEST(FusedOps, EveryPassCanBeDisabledByName) {
  const std::vector<std::string> names = {
      "fuse_gemm_batchnorm",  "fuse_bias_activation", "fuse_layer_norm",   "fuse_gelu",
      "fuse_skip_layer_norm", "fuse_attention",       "cancel_transposes", "collapse_reshapes"};
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ASSERT_EQ(setenv("KILN_DISABLE_PASSES", ("fold_constants," + name).c_str(), 1), 0);
    passes::PassManagerOptions options = passes::PassManagerOptions::from_env();
    unsetenv("KILN_DISABLE_PASSES");
    EXPECT_EQ(options.disabled.count(name), 1u);
    passes::PassManager pm(options);
    passes::add_default_passes(pm);
    auto g = mixed_model();
    std::vector<passes::PassStat> stats = pm.run(*g);
    for (const passes::PassStat& s : stats) {
      if (s.name == name) {
        EXPECT_EQ(s.runs, 0);
      }
    }
  }
  // With the attention fusion off, Softmax stays; with Gelu's off, no Gelu activation appears.
  passes::PassManagerOptions options;
  options.disabled = {"fuse_attention", "fuse_gelu"};
  passes::PassManager pm(options);
  passes::add_default_passes(pm);
  auto g = mixed_model();
  pm.run(*g);
  EXPECT_EQ(ops_of(*g)["Softmax"], 1u);
  EXPECT_EQ(ops_of(*g)["Erf"], 1u);
}

TEST(FusedOps, KernelsRefuseInconsistentInputs) {
  GraphBuilder b(13);
  b.graph->opsets()[ops::kKilnDomain] = 1;
  ir::Value* a = b.input("a", {2, 3});
  ir::Value* y =
      b.node("FusedMatMul", {a, b.random({3, 4}), b.random({3})}, {}, 1, ops::kKilnDomain)[0];
  b.output(y);
  expect_error([&] { testing::run_graph(b.graph, testing::random_feeds(*b.graph, 1)); },
               ErrorCode::InvalidArgument, "bias must be a 1-D float tensor of 4 elements");

  GraphBuilder c(13);
  c.graph->opsets()[ops::kKilnDomain] = 1;
  ir::Value* q = c.input("q", {2, 3});
  ir::Value* out =
      c.node("ScaledDotProductAttention", {q, c.input("k", {4, 5}), c.input("v", {4, 2})}, {}, 1,
             ops::kKilnDomain)[0];
  c.output(out);
  expect_error([&] { testing::run_graph(c.graph, testing::random_feeds(*c.graph, 1)); },
               ErrorCode::InvalidArgument, "must end in the head size 3");

  GraphBuilder d(13);
  d.graph->opsets()[ops::kKilnDomain] = 1;
  ir::Value* x = d.input("x", {2, 3});
  ir::Value* r =
      d.node("FusedGemm", {x, d.random({3, 2})},
             {{"activation", ir::Attribute(std::string("Sparkle"))}}, 1, ops::kKilnDomain)[0];
  d.output(r);
  expect_error([&] { testing::run_graph(d.graph, testing::random_feeds(*d.graph, 1)); },
               ErrorCode::InvalidArgument, "unknown fused activation 'Sparkle'");
}

}  // namespace
}  // namespace kiln
