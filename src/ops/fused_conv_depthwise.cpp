// ai.kiln FusedConvDepthwise: a 1x1 convolution and the depthwise 3x3 convolution that is the
// only reader of its result, as one node (passes/fuse_conv_depthwise), so that the CPU computes
// both in one oneDNN primitive (its dw post-op) and the expanded tensor between them never
// leaves the cache.
//   FusedConvDepthwise(X, W1, B1, W2, B2) -> Y
//   Stage 1: Conv(X, W1, B1) with the node's Conv attributes (1x1, stride 1, no padding, group
//            1), then `activation` / `activation_params`.
//   Stage 2: Conv(stage 1, W2, B2) with group = W2's channel count, kernel 3x3, pads 1 on every
//            side, strides `dw_strides`, then `dw_activation` / `dw_activation_params`.
// The reference runs the registered Conv kernel twice (one oracle per op).
#include "ops/fused_conv_depthwise.hpp"

#include "ops/fused_activation.hpp"
#include "ops/op_traits.hpp"
#include "ops/registry.hpp"
#include "ops/wrapped_kernel.hpp"

namespace kiln::ops {
namespace {

constexpr int kConvOpset = 11;

constexpr const char* kStageAttrs[][2] = {{"activation", "dw_activation"},
                                          {"activation_params", "dw_activation_params"}};

// A detached Conv node with the depthwise stage's convolution attributes.
ir::Node depthwise_stage(const AttrReader& attrs, int64_t channels) {
  ir::Node n;
  n.set_attribute("group", ir::Attribute(channels));
  n.set_attribute("kernel_shape", ir::Attribute(std::vector<int64_t>{3, 3}));
  n.set_attribute("pads", ir::Attribute(std::vector<int64_t>{1, 1, 1, 1}));
  n.set_attribute("strides", ir::Attribute(attrs.attr_ints("dw_strides")));
  return n;
}

void fused_conv_depthwise(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  std::vector<const RtValue*> in1 = {&ctx.input_value(0), &ctx.input_value(1), &ctx.input_value(2)};
  std::vector<RtValue> y1 = run_wrapped_kernel(ctx, "Conv", kConvOpset, in1);
  RtValue mid(apply_activation(y1[0].tensor(), act));

  const Tensor& w2 = ctx.input(3);
  ctx.check(w2.rank() == 4 && w2.dim(1) == 1 && w2.dim(2) == 3 && w2.dim(3) == 3,
            "W2 must be a depthwise 3x3 filter (C, 1, 3, 3), got {}", w2.describe());
  const ir::Node dw = depthwise_stage(ctx, w2.dim(0));
  const FusedActivation dw_act = depthwise_stage_activation(ctx.node());
  std::vector<const RtValue*> in2 = {&mid, &ctx.input_value(3), &ctx.input_value(4)};
  std::vector<RtValue> y2(1);
  KernelContext inner(dw, in2, y2, nullptr, kConvOpset);
  OpRegistry::instance().get("", "Conv", kConvOpset).kernel(inner);
  ctx.set_output(0, apply_activation(y2[0].tensor(), dw_act));
}

// [N, M, H', W'] with H' = (H - 1) / stride + 1 (the 3x3 window, pads 1).
void infer_fused_conv_depthwise(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* w = ctx.input_type(1);
  if (!x || !x->is_tensor()) return;
  if (!x->shape || x->shape->rank() != 4 || !ctx.has_attr("dw_strides")) {
    ctx.set_output_type(0, TypeInfo::tensor(x->dtype, std::nullopt));
    return;
  }
  const std::vector<int64_t> strides = ctx.attr_ints("dw_strides");
  Dim m;
  if (w && w->is_tensor() && w->shape && w->shape->rank() == 4) m = (*w->shape)[0];
  std::vector<Dim> dims = {(*x->shape)[0], m};
  for (size_t d = 0; d < 2; ++d) {
    const Dim& in = (*x->shape)[2 + d];
    const int64_t s = d < strides.size() ? strides[d] : 1;
    dims.push_back(in.is_static() && s > 0 ? Dim((in.value() - 1) / s + 1) : Dim());
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, Shape(std::move(dims))));
}

// Both convolutions' multiply-adds, and a bias and an activation operation per element of each
// result (as FusedConv counts them).
std::optional<double> flops_fused_conv_depthwise(const ir::Node& n, const ValueDims& dims) {
  const std::optional<std::vector<int64_t>> x = dims(n.input(0)), w = dims(n.input(1)),
                                            y = dims(n.output(0));
  if (!x || !w || !y || x->size() != 4 || w->size() != 4 || y->size() != 4) return std::nullopt;
  const double mid = double((*x)[0]) * double((*w)[0]) * double((*x)[2]) * double((*x)[3]);
  const double out = double((*y)[0]) * double((*y)[1]) * double((*y)[2]) * double((*y)[3]);
  return mid * (2.0 * double((*w)[1]) + 2.0) + out * (2.0 * 9.0 + 2.0);
}

KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedConvDepthwise",
                  .kernel = fused_conv_depthwise,
                  .infer = infer_fused_conv_depthwise,
                  .traits = {.flops = flops_fused_conv_depthwise}});

}  // namespace

FusedActivation depthwise_stage_activation(const ir::Node& node) {
  ir::Node stage;
  for (const auto& [plain, prefixed] : kStageAttrs) {
    if (const ir::Attribute* a = node.attribute(prefixed)) stage.set_attribute(plain, *a);
  }
  return FusedActivation::from_node(AttrReader(stage));
}

void set_depthwise_stage_activation(ir::Node& node, const FusedActivation& act) {
  ir::Node stage;
  act.set_on(stage);
  for (const auto& [plain, prefixed] : kStageAttrs) {
    if (const ir::Attribute* a = stage.attribute(plain)) node.set_attribute(prefixed, *a);
  }
}

}  // namespace kiln::ops
