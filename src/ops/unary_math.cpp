// Unary math: Abs, Neg, Sign, Sqrt, Exp, Log, Reciprocal, Ceil, Floor, Round, the trigonometric and
// hyperbolic functions, Erf, IsNaN, IsInf, Not and BitwiseNot.
#include <cmath>
#include <limits>

#include "ops/elementwise_utils.hpp"
#include "ops/point_ops.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

// Float-only math ops: f maps double -> double. All commute with Transpose; FP16 says whether
// the op is float16-safe (docs/FP16.md: Exp, Log, Reciprocal overflow or cancel).
#define KILN_FLOAT_UNARY(NAME, OP, EXPR, FP16)                                       \
  void OP(KernelContext& ctx) {                                                      \
    ctx.set_output(0, map_float(ctx.input(0), NAME, [](double x) { return EXPR; })); \
  }                                                                                  \
  KILN_REGISTER_OP(                                                                  \
      {.op_type = NAME,                                                              \
       .kernel = OP,                                                                 \
       .infer = infer_same_as_input0,                                                \
       .traits = {.pointwise = Pointwise::Unary, .fp16 = {.safe = FP16}, .transposes = true}});

KILN_FLOAT_UNARY("Sqrt", sqrt_op, point::sqrt(x), true)
KILN_FLOAT_UNARY("Exp", exp_op, point::exp(x), false)
KILN_FLOAT_UNARY("Log", log_op, point::log(x), false)
KILN_FLOAT_UNARY("Reciprocal", reciprocal_op, point::reciprocal(x), false)
KILN_FLOAT_UNARY("Ceil", ceil_op, std::ceil(x), false)
KILN_FLOAT_UNARY("Floor", floor_op, std::floor(x), false)
// Round halves to even, as the spec asks (nearbyint uses the default round-to-nearest-even mode).
KILN_FLOAT_UNARY("Round", round_op, std::nearbyint(x), false)
KILN_FLOAT_UNARY("Sin", sin_op, std::sin(x), false)
KILN_FLOAT_UNARY("Cos", cos_op, std::cos(x), false)
KILN_FLOAT_UNARY("Tan", tan_op, std::tan(x), false)
KILN_FLOAT_UNARY("Asin", asin_op, std::asin(x), false)
KILN_FLOAT_UNARY("Acos", acos_op, std::acos(x), false)
KILN_FLOAT_UNARY("Atan", atan_op, std::atan(x), false)
KILN_FLOAT_UNARY("Sinh", sinh_op, std::sinh(x), false)
KILN_FLOAT_UNARY("Cosh", cosh_op, std::cosh(x), false)
KILN_FLOAT_UNARY("Asinh", asinh_op, std::asinh(x), false)
KILN_FLOAT_UNARY("Acosh", acosh_op, std::acosh(x), false)
KILN_FLOAT_UNARY("Atanh", atanh_op, std::atanh(x), false)

#undef KILN_FLOAT_UNARY

void abs_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Abs", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<T, T>(x, [](T v) -> T {
                     if constexpr (is_float_v<T>) {
                       return from_double<T>(point::abs(to_double(v)));
                     } else {
                       return point::abs(v);
                     }
                   });
                 }));
}

void neg_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Neg", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   if constexpr (std::is_unsigned_v<T>) {
                     ctx.fail("element type {} is not allowed (Neg takes signed types)",
                              dtype_name(x.dtype()));
                     return Tensor();
                   } else {
                     return map_unary<T, T>(x, [](T v) -> T {
                       if constexpr (is_float_v<T>) {
                         return from_double<T>(point::neg(to_double(v)));
                       } else {
                         return point::neg(v);
                       }
                     });
                   }
                 }));
}

void sign_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Sign", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<T, T>(x, [](T v) -> T {
                     if constexpr (is_float_v<T>) {
                       double d = to_double(v);
                       if (std::isnan(d)) return v;  // keeps the NaN's bits
                       return from_double<T>(point::sign(d));
                     } else if constexpr (std::is_signed_v<T>) {
                       return static_cast<T>(v > 0 ? 1 : v < 0 ? -1 : 0);
                     } else {
                       return static_cast<T>(v > 0 ? 1 : 0);
                     }
                   });
                 }));
}

// Erf accepts every numeric type; integer results truncate toward zero like a cast.
void erf_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Erf", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<T, T>(x, [](T v) -> T {
                     if constexpr (is_float_v<T>) {
                       return from_double<T>(point::erf(to_double(v)));
                     } else {
                       return static_cast<T>(std::trunc(point::erf(static_cast<double>(v))));
                     }
                   });
                 }));
}

void isnan_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "IsNaN", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<bool, T>(x, [](T v) { return std::isnan(to_double(v)); });
                 }));
}

void isinf_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool neg = ctx.attr_int("detect_negative", 1) != 0;
  const bool pos = ctx.attr_int("detect_positive", 1) != 0;
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "IsInf", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<bool, T>(x, [&](T v) {
                     double d = to_double(v);
                     return std::isinf(d) && ((d > 0 && pos) || (d < 0 && neg));
                   });
                 }));
}

void infer_bool_same_shape(InferContext& ctx) {
  infer_same_shape_as(ctx, DataType::Bool);
}

void not_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.dtype() == DataType::Bool, "Not takes bool, got {}", dtype_name(x.dtype()));
  ctx.set_output(0, map_unary<bool, bool>(x, [](bool v) { return !v; }));
}

void bitwise_not_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Integer>(x.dtype(), "BitwiseNot", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<T, T>(x, [](T v) { return static_cast<T>(~v); });
                 }));
}

KILN_REGISTER_OP({.op_type = "Abs",
                  .kernel = abs_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Neg",
                  .kernel = neg_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Sign",
                  .kernel = sign_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Erf",
                  .kernel = erf_op,
                  .infer = infer_same_as_input0,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
// IsNaN is exact in float16 (a float32 NaN stays NaN, a finite value never becomes one), so
// torch's attention guard Where(IsNaN(P), 0, P) stays float16 with no Cast. Not IsInf: a float32
// value above 65504 would become infinite.
KILN_REGISTER_OP({.op_type = "IsNaN",
                  .kernel = isnan_op,
                  .infer = infer_bool_same_shape,
                  .traits = {
                      .pointwise = Pointwise::Unary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "IsInf",
                  .kernel = isinf_op,
                  .infer = infer_bool_same_shape,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Not",
                  .kernel = not_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "BitwiseNot",
                  .kernel = bitwise_not_op,
                  .infer = infer_same_as_input0,
                  .traits = {.pointwise = Pointwise::Unary}});

}  // namespace
}  // namespace kiln::ops
