// Activations: Relu, LeakyRelu, Elu, Selu, Celu, Sigmoid, HardSigmoid, HardSwish, Softplus,
// Softsign, Tanh, Gelu, Mish, Swish, ThresholdedRelu, Shrink, PRelu and Clip.
#include <cmath>
#include <limits>
#include <numbers>

#include "ops/elementwise_utils.hpp"
#include "ops/point_ops.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

void relu_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Relu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_unsigned_v<T>) {
          ctx.fail("element type {} is not allowed (Relu takes float and signed integer types)",
                   dtype_name(x.dtype()));
          return Tensor();
        } else {
          // NaN stays NaN (numpy maximum semantics).
          return map_unary<T, T>(x, [](T v) {
            if constexpr (is_half_v<T>) {
              return to_double(v) < 0 ? T(0) : v;  // no arithmetic on the half types
            } else {
              return point::relu(v);
            }
          });
        }
      }));
}

void leaky_relu_op(KernelContext& ctx) {
  const double alpha = ctx.attr_float("alpha", 0.01f);
  ctx.set_output(0, map_float(ctx.input(0), "LeakyRelu",
                              [&](double x) { return point::leaky_relu(x, alpha); }));
}

void elu_op(KernelContext& ctx) {
  const double alpha = ctx.attr_float("alpha", 1.0f);
  ctx.set_output(0, map_float(ctx.input(0), "Elu", [&](double x) { return point::elu(x, alpha); }));
}

void selu_op(KernelContext& ctx) {
  // Selu-1 had rounder defaults than Selu-6.
  const bool v1 = ctx.opset() < 6;
  const double alpha = ctx.attr_float("alpha", v1 ? 1.6732f : 1.67326319217681884765625f);
  const double gamma = ctx.attr_float("gamma", v1 ? 1.0507f : 1.05070102214813232421875f);
  ctx.set_output(
      0, map_float(ctx.input(0), "Selu", [&](double x) { return point::selu(x, alpha, gamma); }));
}

void celu_op(KernelContext& ctx) {
  const double alpha = ctx.attr_float("alpha", 1.0f);
  ctx.check(alpha != 0, "alpha must be non-zero");
  ctx.set_output(0,
                 map_float(ctx.input(0), "Celu", [&](double x) { return point::celu(x, alpha); }));
}

void sigmoid_op(KernelContext& ctx) {
  ctx.set_output(0, map_float(ctx.input(0), "Sigmoid", [](double x) { return point::sigmoid(x); }));
}

void hard_sigmoid_op(KernelContext& ctx) {
  const double alpha = ctx.attr_float("alpha", 0.2f);
  const double beta = ctx.attr_float("beta", 0.5f);
  ctx.set_output(0, map_float(ctx.input(0), "HardSigmoid",
                              [&](double x) { return point::hard_sigmoid(x, alpha, beta); }));
}

void hard_swish_op(KernelContext& ctx) {
  ctx.set_output(
      0, map_float(ctx.input(0), "HardSwish", [](double x) { return point::hard_swish(x); }));
}

void softplus_op(KernelContext& ctx) {
  ctx.set_output(0,
                 map_float(ctx.input(0), "Softplus", [](double x) { return point::softplus(x); }));
}

void softsign_op(KernelContext& ctx) {
  ctx.set_output(0,
                 map_float(ctx.input(0), "Softsign", [](double x) { return point::softsign(x); }));
}

void tanh_op(KernelContext& ctx) {
  ctx.set_output(0, map_float(ctx.input(0), "Tanh", [](double x) { return point::tanh(x); }));
}

void gelu_op(KernelContext& ctx) {
  const std::string approximate = ctx.attr_string("approximate", "none");
  if (approximate == "none") {
    ctx.set_output(0, map_float(ctx.input(0), "Gelu", [](double x) { return point::gelu_erf(x); }));
  } else if (approximate == "tanh") {
    ctx.set_output(0,
                   map_float(ctx.input(0), "Gelu", [](double x) { return point::gelu_tanh(x); }));
  } else {
    ctx.fail("approximate must be 'none' or 'tanh', got '{}'", approximate);
  }
}

void mish_op(KernelContext& ctx) {
  ctx.set_output(0, map_float(ctx.input(0), "Mish", [](double x) { return point::mish(x); }));
}

void swish_op(KernelContext& ctx) {
  const double alpha = ctx.attr_float("alpha", 1.0f);
  ctx.set_output(
      0, map_float(ctx.input(0), "Swish", [&](double x) { return point::swish(x, alpha); }));
}

void thresholded_relu_op(KernelContext& ctx) {
  const double alpha = ctx.attr_float("alpha", 1.0f);
  ctx.set_output(0, map_float(ctx.input(0), "ThresholdedRelu",
                              [&](double x) { return point::thresholded_relu(x, alpha); }));
}

// Shrink takes every numeric type; integer results truncate like a cast of the float formula.
void shrink_op(KernelContext& ctx) {
  const double lambd = ctx.attr_float("lambd", 0.5f);
  const double bias = ctx.attr_float("bias", 0.0f);
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Shrink", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<T, T>(x, [&](T v) -> T {
                     double d = to_double(v);
                     double r = d < -lambd ? d + bias : d > lambd ? d - bias : 0.0;
                     if constexpr (is_float_v<T>) {
                       return from_double<T>(r);
                     } else {
                       return saturate_to_int<T>(r);
                     }
                   });
                 }));
}

void prelu_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor slope = ctx.input(1);
  ctx.check(x.dtype() == slope.dtype(), "X and slope types differ: {} vs {}", dtype_name(x.dtype()),
            dtype_name(slope.dtype()));
  // Old models give a per-channel slope [C] for X [N, C, ...]; align it to axis 1.
  if (ctx.opset() < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.dim(0) != 1 &&
      slope.dim(0) == x.dim(1) && x.dim(x.rank() - 1) != slope.dim(0)) {
    std::vector<int64_t> dims(x.rank() - 1, 1);
    dims[0] = slope.dim(0);
    slope = slope.reshaped(dims);
  }
  std::vector<int64_t> out_dims = broadcast_dims(ctx, {x.dims(), slope.dims()});
  ctx.check(out_dims == x.dims(), "slope {} does not broadcast to X {}",
            dims_to_string(slope.dims()), dims_to_string(x.dims()));
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "PRelu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return broadcast_binary<T, T, T>(ctx, x, slope, [](T v, T s) -> T {
          if constexpr (is_float_v<T>) {
            double d = to_double(v);
            return d < 0 ? from_double<T>(d * to_double(s)) : v;
          } else if constexpr (std::is_unsigned_v<T>) {
            return v;  // never negative
          } else {
            // Multiply in uint64 so the product wraps instead of overflowing a promoted int.
            return v < 0 ? static_cast<T>(static_cast<uint64_t>(v) * static_cast<uint64_t>(s)) : v;
          }
        });
      }));
}

// Clip before opset 11 reads min/max from attributes (float only); from 11 on from optional
// scalar inputs of the element type. min > max yields max everywhere, as the spec says.
void clip_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() < 11) {
    // Clip-6 defaults to the float range; Clip-1 had no defaults, i.e. no bound.
    const double inf = std::numeric_limits<double>::infinity();
    const bool v1 = ctx.opset() < 6;
    const double lo = ctx.has_attr("min") ? ctx.attr_float("min")
                      : v1                ? -inf
                                          : std::numeric_limits<float>::lowest();
    const double hi = ctx.has_attr("max") ? ctx.attr_float("max")
                      : v1                ? inf
                                          : std::numeric_limits<float>::max();
    ctx.set_output(0, map_float(x, "Clip", [&](double v) { return point::clip(v, lo, hi); }));
    return;
  }
  auto bound = [&](size_t i) -> const Tensor* {
    if (!ctx.has_input(i)) return nullptr;
    const Tensor& t = ctx.input(i);
    ctx.check(t.dtype() == x.dtype(), "input {} has type {}, expected {}", i, dtype_name(t.dtype()),
              dtype_name(x.dtype()));
    ctx.check(t.numel() == 1, "input {} must be a scalar, got {}", i, t.describe());
    return &t;
  };
  const Tensor* lo_t = bound(1);
  const Tensor* hi_t = bound(2);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Clip", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   if constexpr (is_float_v<T>) {
                     // A missing bound is an infinite one: no comparison with it ever holds.
                     constexpr double kInf = std::numeric_limits<double>::infinity();
                     const double lo = lo_t ? to_double(lo_t->data<T>()[0]) : -kInf;
                     const double hi = hi_t ? to_double(hi_t->data<T>()[0]) : kInf;
                     return map_unary<T, T>(x, [&](T v) -> T {
                       const double d = to_double(v);
                       return std::isnan(d) ? v : from_double<T>(point::clip(d, lo, hi));
                     });
                   } else {
                     const T lo = lo_t ? lo_t->data<T>()[0] : std::numeric_limits<T>::lowest();
                     const T hi = hi_t ? hi_t->data<T>()[0] : std::numeric_limits<T>::max();
                     return map_unary<T, T>(x, [&](T v) { return point::clip(v, lo, hi); });
                   }
                 }));
}

KILN_REGISTER_OP({.op_type = "Relu",
                  .kernel = relu_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary,
                             .fp16 = {.safe = true},
                             .transposes = true,
                             .quantization = true}});
KILN_REGISTER_OP({.op_type = "LeakyRelu",
                  .kernel = leaky_relu_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Elu",
                  .kernel = elu_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Selu",
                  .kernel = selu_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Celu",
                  .kernel = celu_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Sigmoid",
                  .kernel = sigmoid_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "HardSigmoid",
                  .kernel = hard_sigmoid_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "HardSwish",
                  .kernel = hard_swish_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Softplus",
                  .kernel = softplus_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Softsign",
                  .kernel = softsign_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Tanh",
                  .kernel = tanh_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Gelu",
                  .kernel = gelu_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Mish",
                  .kernel = mish_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Swish",
                  .kernel = swish_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "ThresholdedRelu",
                  .kernel = thresholded_relu_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Shrink",
                  .kernel = shrink_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary}});
KILN_REGISTER_OP({.op_type = "PRelu",
                  .kernel = prelu_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Binary, .fp16 = {.safe = true}}});
KILN_REGISTER_OP({.op_type = "Clip",
                  .kernel = clip_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary,
                             .fp16 = {.safe = true},
                             .transposes = true,
                             .quantization = true}});

}  // namespace
}  // namespace kiln::ops
