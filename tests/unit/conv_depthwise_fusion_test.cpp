// passes/fuse_conv_depthwise (a 1x1 convolution and the depthwise 3x3 one reading it as one
// ai.kiln FusedConvDepthwise) and its CPU kernel, onednn.conv_dw, against the reference
// interpreter on the unfused graph.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/cpu_backend.hpp"
#include "graph_builder.hpp"
#include "passes/pass_manager.hpp"
#include "runtime/executor.hpp"

namespace kiln {
namespace {

using testing::expect_rewrite_keeps_results;
using testing::GraphBuilder;
using testing::ops_of;

// The bias and activation fusion, then this one (as the CPU's pipeline runs them).
struct FuseThenFold {
  std::string_view name() const { return "fuse_bias_activation+fuse_conv_depthwise"; }
  bool apply(ir::Graph& g) const {
    passes::FuseBiasActivation{}.apply(g);
    return passes::FuseConvDepthwise{}.apply(g);
  }
};

struct Case {
  int64_t stride = 1;
  std::string act = "Clip";  // of both convolutions: Clip (ReLU6), Relu or None
  bool pre_conv = false;     // a 3x3 convolution first, so the fused node reads a blocked tensor
  bool post_conv = false;    // a 1x1 projection after, so it writes a blocked tensor
  int variant = 0;           // 1: the expansion is also a graph output; 2: read twice; 3: pads 0;
                             // 4: stride 3; 5: dilation 2
  int64_t h = 13, c = 8, m = 24;
};

ir::Value* activation(GraphBuilder& b, ir::Value* v, const std::string& act) {
  if (act == "Clip") return b.op("Clip", {v, b.scalar(0.f), b.scalar(6.f)});
  if (act == "Relu") return b.op("Relu", {v});
  return v;
}

std::shared_ptr<ir::Graph> expansion_then_depthwise(const Case& k) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {1, k.c, k.h, k.h});
  if (k.pre_conv) {
    x = b.op("Conv", {x, b.random({k.c, k.c, 3, 3}), b.random({k.c})},
             {{"pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1})}});
  }
  // Weights up to 3 so that ReLU6 clips often.
  ir::Value* e =
      activation(b, b.op("Conv", {x, b.random({k.m, k.c, 1, 1}, -3, 3), b.random({k.m})}), k.act);
  const int64_t pad = k.variant == 3 ? 0 : 1;
  const int64_t stride = k.variant == 4 ? 3 : k.stride;
  std::map<std::string, ir::Attribute> attrs = {
      {"pads", ir::Attribute(std::vector<int64_t>{pad, pad, pad, pad})},
      {"strides", ir::Attribute(std::vector<int64_t>{stride, stride})},
      {"group", ir::Attribute(k.m)}};
  if (k.variant == 5) attrs["dilations"] = ir::Attribute(std::vector<int64_t>{2, 2});
  ir::Value* d = activation(
      b, b.op("Conv", {e, b.random({k.m, 1, 3, 3}), b.random({k.m})}, std::move(attrs)), k.act);
  if (k.post_conv) d = b.op("Conv", {d, b.random({16, k.m, 1, 1}), b.random({16})});
  b.output(d);
  if (k.variant == 1) b.output(e);
  if (k.variant == 2) b.output(b.op("Relu", {e}));
  return b.graph;
}

TEST(FuseConvDepthwise, ExpansionAndDepthwiseBecomeOneNode) {
  for (int64_t stride : {1, 2}) {
    for (const char* act : {"Clip", "Relu", ""}) {
      SCOPED_TRACE(::testing::Message() << "stride " << stride << " " << act);
      const Case k{.stride = stride, .act = act};
      auto g =
          expect_rewrite_keeps_results([&] { return expansion_then_depthwise(k); }, FuseThenFold{});
      ASSERT_EQ(g->node_count(), 1u) << ir::print_graph(*g);
      EXPECT_EQ(ops_of(*g)["ai.kiln.FusedConvDepthwise"], 1u);
    }
  }
}

TEST(FuseConvDepthwise, LeavesSharedOrOutputIntermediatesAndOtherGeometries) {
  for (int variant = 1; variant <= 5; ++variant) {
    SCOPED_TRACE(variant);
    std::shared_ptr<ir::Graph> g = expansion_then_depthwise(Case{.variant = variant});
    passes::FuseBiasActivation{}.apply(*g);
    EXPECT_FALSE(passes::FuseConvDepthwise{}.apply(*g)) << ir::print_graph(*g);
  }
}

TEST(FuseConvDepthwise, OnlyInTheCpuPipeline) {
  for (const char* device : {"cpu", "gpu"}) {
    std::shared_ptr<ir::Graph> g = expansion_then_depthwise(Case{});
    passes::PassManager pm;
    passes::add_device_passes(passes::add_default_passes(pm, device), device).run(*g);
    EXPECT_EQ(ops_of(*g)["ai.kiln.FusedConvDepthwise"], std::string(device) == "cpu" ? 1u : 0u)
        << device;
  }
}

// kiln compile --fp16 / --bf16 converts after the passes; the float32-only fused node would stay
// float32 between casts there, so the pass is left out.
TEST(FuseConvDepthwise, NotBeforeAFloat16Conversion) {
  std::shared_ptr<ir::Graph> g = expansion_then_depthwise(Case{});
  passes::PassManager pm;
  passes::add_device_passes(passes::add_default_passes(pm, "cpu", true), "cpu", true).run(*g);
  EXPECT_EQ(ops_of(*g)["ai.kiln.FusedConvDepthwise"], 0u);
  EXPECT_EQ(ops_of(*g)["ai.kiln.FusedConv"], 2u);
}

TEST(FuseConvDepthwise, DisabledByName) {
  passes::PassManagerOptions options;
  options.disabled = {"fuse_conv_depthwise"};
  passes::PassManager pm(options);
  passes::add_device_passes(passes::add_default_passes(pm, "cpu"), "cpu");
  std::shared_ptr<ir::Graph> g = expansion_then_depthwise(Case{});
  pm.run(*g);
  EXPECT_EQ(ops_of(*g)["ai.kiln.FusedConvDepthwise"], 0u);
  EXPECT_EQ(ops_of(*g)["ai.kiln.FusedConv"], 2u);
}

// The CPU kernel (fused primitive, or its two-convolution fallback where oneDNN refuses one, as
// with row-major sides) within 1e-5 of the reference's result on the unfused graph.
TEST(FuseConvDepthwise, CpuKernelMatchesTheUnfusedReference) {
  for (int64_t stride : {1, 2}) {
    for (const char* act : {"Clip", "Relu"}) {
      // 0: row-major sides; 1: blocked sides, small (oneDNN's ref_fused_convolution); 2:
      // blocked, large enough for oneDNN's jit 1x1 kernel with the depthwise fused in.
      for (int form : {0, 1, 2}) {
        SCOPED_TRACE(::testing::Message() << "stride " << stride << " " << act << " form " << form);
        const Case k{.stride = stride,
                     .act = act,
                     .pre_conv = form > 0,
                     .post_conv = form > 0,
                     .h = form == 2 ? 56 : 13,
                     .c = form == 2 ? 24 : 8,
                     .m = form == 2 ? 144 : 24};
        std::shared_ptr<ir::Graph> reference = expansion_then_depthwise(k);
        std::shared_ptr<ir::Graph> fused = expansion_then_depthwise(k);
        FuseThenFold{}.apply(*fused);
        passes::EliminateDeadCode{}.apply(*fused);
        ASSERT_EQ(ops_of(*fused)["ai.kiln.FusedConvDepthwise"], 1u);
        runtime::Executor ex(fused, {.threads = 1});
        std::vector<RtValue> feeds = testing::random_feeds(*reference, 7);
        std::vector<RtValue> fast = ex.run(feeds);
        std::vector<RtValue> again = ex.run(feeds);
        std::vector<RtValue> ref = testing::run_graph(reference, feeds);
        const Tensor& a = fast[0].tensor();
        const Tensor& r = ref[0].tensor();
        ASSERT_EQ(a.dims(), r.dims());
        double scale = 0;
        for (int64_t i = 0; i < r.numel(); ++i) {
          scale = std::max(scale, std::abs(double(r.data<float>()[i])));
        }
        ASSERT_GT(scale, 0);
        for (int64_t i = 0; i < a.numel(); ++i) {
          const double va = a.data<float>()[i], vr = r.data<float>()[i];
          ASSERT_LE(std::abs(va - vr), 1e-5 * scale) << "at " << i;
          ASSERT_EQ(va, again[0].tensor().data<float>()[i]) << "second run differs at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
