// ai.kiln FusedConv, FusedGemm and FusedMatMul: Conv / Gemm / MatMul (+ bias) followed by one of
// the activations of ops/fused_activation.hpp. Written by passes/fuse_bias_activation.
//   FusedConv(X, W, B?, Z?)  Conv's inputs and attributes, plus Z (a residual of the result's
//                          shape, added before the activation: passes/fuse_conv_residual),
//                          and `input_max` (float): X is read as min(X, input_max), the upper
//                          half of its producer's Clip (passes/fold_clip_into_depthwise).
//   FusedGemm(A, B, C?)    Gemm's inputs and attributes, then the activation.
//   FusedMatMul(A, B, bias?)  MatMul, plus a 1-D bias of the output's last dim, then the
//                          activation.
// Every one also takes `activation` (string) and `activation_params` (floats).
#include "ops/elementwise_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/registry.hpp"
#include "ops/wrapped_kernel.hpp"

namespace kiln::ops {
namespace {

// The opsets whose reference kernels the fused ops run (they behave alike at every opset these
// ops appear in models that Kiln fuses).
constexpr int kConvOpset = 11;
constexpr int kGemmOpset = 13;
constexpr int kMatMulOpset = 13;

std::vector<const RtValue*> inputs_of(const KernelContext& ctx, size_t count) {
  std::vector<const RtValue*> in;
  for (size_t i = 0; i < count; ++i) in.push_back(ctx.has_input(i) ? &ctx.input_value(i) : nullptr);
  return in;
}

// X with every element above `max` lowered to it (NaN stays NaN).
Tensor clipped_above(const Tensor& x, float max) {
  return map_float(x, "FusedConv input_max", [&](double v) { return v > max ? double{max} : v; });
}

void fused_conv(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  std::vector<const RtValue*> in = inputs_of(ctx, 3);
  RtValue clipped;
  if (ctx.node().attribute("input_max")) {
    clipped = RtValue(clipped_above(ctx.input(0), ctx.attr_float("input_max")));
    in[0] = &clipped;
  }
  std::vector<RtValue> out = run_wrapped_kernel(ctx, "Conv", kConvOpset, in);
  if (!ctx.has_input(3)) {
    ctx.set_output(0, apply_activation(out[0].tensor(), act));
    return;
  }
  const Tensor& y = out[0].tensor();
  const Tensor& z = ctx.input(3);
  ctx.check(z.dtype() == y.dtype() && z.dims() == y.dims(),
            "the residual Z must have the convolution's result type and shape {} {}, got {}",
            dtype_name(y.dtype()), dims_to_string(y.dims()), z.describe());
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(y.dtype(), "FusedConv", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor r(y.dtype(), y.dims());
                   const T* py = y.data<T>();
                   const T* pz = z.data<T>();
                   T* pr = r.data<T>();
                   for (int64_t i = 0; i < y.numel(); ++i) {
                     pr[i] = from_double<T>(act.apply(to_double(py[i]) + to_double(pz[i])));
                   }
                   return r;
                 }));
}

void fused_gemm(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  std::vector<RtValue> out = run_wrapped_kernel(ctx, "Gemm", kGemmOpset, inputs_of(ctx, 3));
  ctx.set_output(0, apply_activation(out[0].tensor(), act));
}

void fused_matmul(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  std::vector<RtValue> out = run_wrapped_kernel(ctx, "MatMul", kMatMulOpset, inputs_of(ctx, 2));
  const Tensor& y = out[0].tensor();
  if (!ctx.has_input(2)) {
    ctx.set_output(0, apply_activation(y, act));
    return;
  }
  const Tensor& bias = ctx.input(2);
  const int64_t n = y.rank() ? y.dim(y.rank() - 1) : 1;
  ctx.check(bias.dtype() == y.dtype() && bias.rank() == 1 && bias.dim(0) == n,
            "bias must be a 1-D {} tensor of {} elements (the output's last dim), got {}",
            dtype_name(y.dtype()), n, bias.describe());
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(y.dtype(), "FusedMatMul", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor r(y.dtype(), y.dims());
                   const T* py = y.data<T>();
                   const T* pb = bias.data<T>();
                   T* pr = r.data<T>();
                   for (int64_t i = 0; i < y.numel(); ++i) {
                     pr[i] = from_double<T>(act.apply(to_double(py[i]) + to_double(pb[i % n])));
                   }
                   return r;
                 }));
}

void infer_fused_conv(InferContext& ctx) {
  infer_wrapped(ctx, "Conv", kConvOpset);
}
void infer_fused_gemm(InferContext& ctx) {
  infer_wrapped(ctx, "Gemm", kGemmOpset);
}
void infer_fused_matmul(InferContext& ctx) {
  infer_wrapped(ctx, "MatMul", kMatMulOpset);
}

KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedConv",
                  .kernel = fused_conv,
                  .infer = infer_fused_conv,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_fused_conv}});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedGemm",
                  .kernel = fused_gemm,
                  .infer = infer_fused_gemm,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_fused_gemm}});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedMatMul",
                  .kernel = fused_matmul,
                  .infer = infer_fused_matmul,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_fused_matmul}});

}  // namespace
}  // namespace kiln::ops
