// Binary element-wise ops beyond +-*/: Pow (mixed base and exponent types), Mod, BitShift,
// BitwiseAnd/Or/Xor, the logical And/Or/Xor and the comparisons (Equal also on strings).
#include <cmath>
#include <limits>

#include "ops/elementwise_utils.hpp"
#include "ops/point_ops.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

// Same-type binary op over the DTypeSet family; fn(ctx-free generic lambda) returns Out or T.
template <DTypeSet Set, bool BoolOut, typename Fn>
void same_type_binary(KernelContext& ctx, Fn&& fn) {
  const Tensor& a = ctx.input(0);
  const Tensor b = legacy_broadcast_operand(ctx, a, ctx.input(1));
  ctx.check(a.dtype() == b.dtype(), "operand types differ: {} vs {}", dtype_name(a.dtype()),
            dtype_name(b.dtype()));
  ctx.set_output(0, dispatch_dtype<Set>(a.dtype(), ctx.node().op_type(), [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   using Out = std::conditional_t<BoolOut, bool, T>;
                   return broadcast_binary<Out, T, T>(
                       ctx, a, b, [&](const T& x, const T& y) -> Out { return fn(x, y); });
                 }));
}

// Integer power by squaring with wrap-around; negative exponents truncate 1/x^n toward zero.
template <typename T, typename E>
T int_pow(const KernelContext& ctx, T base, E exp) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      ctx.check(base != 0, "integer zero raised to the negative power {}", exp);
      if (base == 1) return T(1);
      if constexpr (std::is_signed_v<T>) {
        if (base == T(-1)) return (exp % 2 == 0) ? T(1) : T(-1);
      }
      return T(0);
    }
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  auto e = static_cast<uint64_t>(exp);
  while (e) {
    if (e & 1u) result *= b;
    b *= b;
    e >>= 1u;
  }
  return static_cast<T>(result);
}

// Output has the base's type; a float exponent on an integer base truncates the float result.
template <typename T, typename E>
T pow_element(const KernelContext& ctx, T a, E b) {
  if constexpr (is_float_v<T>) {
    return from_double<T>(point::pow(to_double(a), to_double(b)));
  } else if constexpr (is_float_v<E>) {
    return saturate_to_int<T>(std::pow(static_cast<double>(a), to_double(b)));
  } else {
    return int_pow<T, E>(ctx, a, b);
  }
}

void pow_op(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor y = legacy_broadcast_operand(ctx, x, ctx.input(1));
  if (ctx.opset() < 12) {
    ctx.check(x.dtype() == y.dtype(), "base and exponent types differ before opset 12: {} vs {}",
              dtype_name(x.dtype()), dtype_name(y.dtype()));
  }
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Pow", [&](auto tb) {
                   using T = typename decltype(tb)::type;
                   return dispatch_dtype<DTypeSet::Numeric>(
                       y.dtype(), "Pow exponent", [&](auto te) {
                         using E = typename decltype(te)::type;
                         return broadcast_binary<T, T, E>(
                             ctx, x, y, [&](T a, E b) { return pow_element<T, E>(ctx, a, b); });
                       });
                 }));
}

// fmod=0: integer modulo takes the sign of the divisor (Python %); fmod=1: C fmod (sign of the
// dividend). The spec requires fmod=1 for floating-point inputs.
void mod_op(KernelContext& ctx) {
  const bool fmod = ctx.attr_int("fmod", 0) != 0;
  const DataType type = ctx.input(0).dtype();
  if (!fmod && dtype_is_float(type)) {
    ctx.fail("fmod must be 1 for floating-point inputs ({})", dtype_name(type));
  }
  same_type_binary<DTypeSet::Numeric, false>(ctx, [&](auto a, auto b) {
    using T = decltype(a);
    if constexpr (is_float_v<T>) {
      return from_double<T>(std::fmod(to_double(a), to_double(b)));
    } else {
      ctx.check(b != 0, "integer modulo by zero");
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);  // avoids min % -1 overflow
      }
      T r = static_cast<T>(a % b);
      if constexpr (std::is_signed_v<T>) {
        if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      }
      return r;
    }
  });
}

void bit_shift_op(KernelContext& ctx) {
  const std::string direction = ctx.attr_string("direction");
  ctx.check(direction == "LEFT" || direction == "RIGHT",
            "direction must be 'LEFT' or 'RIGHT', got '{}'", direction);
  const bool left = direction == "LEFT";
  const DataType type = ctx.input(0).dtype();
  ctx.check(dtype_is_integer(type) && !dtype_is_signed(type),
            "BitShift takes unsigned integer types, got {}", dtype_name(type));
  same_type_binary<DTypeSet::Integer, false>(ctx, [&](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_signed_v<T>) {
      return a;  // unreachable: rejected above
    } else {
      // Shifting by the bit width or more is undefined in C++; every bit is shifted out.
      if (b >= std::numeric_limits<T>::digits) return T(0);
      return left ? static_cast<T>(a << b) : static_cast<T>(a >> b);
    }
  });
}

void bitwise_and_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Integer, false>(
      ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a & b); });
}
void bitwise_or_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Integer, false>(
      ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a | b); });
}
void bitwise_xor_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Integer, false>(
      ctx, [](auto a, auto b) { return static_cast<decltype(a)>(a ^ b); });
}

template <typename Fn>
void logical(KernelContext& ctx, Fn fn) {
  ctx.check(ctx.input(0).dtype() == DataType::Bool, "takes bool inputs, got {}",
            dtype_name(ctx.input(0).dtype()));
  same_type_binary<DTypeSet::NumericBool, true>(ctx, [&](auto a, auto b) {
    if constexpr (std::is_same_v<decltype(a), bool>) {
      return fn(a, b);
    } else {
      return false;  // unreachable: rejected above
    }
  });
}
void and_op(KernelContext& ctx) {
  logical(ctx, [](bool a, bool b) { return a && b; });
}
void or_op(KernelContext& ctx) {
  logical(ctx, [](bool a, bool b) { return a || b; });
}
void xor_op(KernelContext& ctx) {
  logical(ctx, [](bool a, bool b) { return a != b; });
}

// Comparisons widen half types to double; integers and strings compare natively.
template <typename T>
decltype(auto) comparable(const T& v) {
  if constexpr (is_half_v<T>) {
    return to_double(v);
  } else {
    return (v);
  }
}

void equal_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::All, true>(
      ctx, [](const auto& a, const auto& b) { return comparable(a) == comparable(b); });
}
void less_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Numeric, true>(
      ctx, [](auto a, auto b) { return comparable(a) < comparable(b); });
}
void greater_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Numeric, true>(
      ctx, [](auto a, auto b) { return comparable(a) > comparable(b); });
}
void less_equal_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Numeric, true>(
      ctx, [](auto a, auto b) { return comparable(a) <= comparable(b); });
}
void greater_equal_op(KernelContext& ctx) {
  same_type_binary<DTypeSet::Numeric, true>(
      ctx, [](auto a, auto b) { return comparable(a) >= comparable(b); });
}

KILN_REGISTER_OP({.op_type = "Pow",
                  .kernel = pow_op,
                  .infer = infer_binary_legacy_same,
                  .traits = {.pointwise = Pointwise::Binary, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Mod",
                  .kernel = mod_op,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "BitShift",
                  .kernel = bit_shift_op,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "BitwiseAnd",
                  .kernel = bitwise_and_op,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "BitwiseOr",
                  .kernel = bitwise_or_op,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "BitwiseXor",
                  .kernel = bitwise_xor_op,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "And",
                  .kernel = and_op,
                  .infer = infer_binary_legacy_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "Or",
                  .kernel = or_op,
                  .infer = infer_binary_legacy_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "Xor",
                  .kernel = xor_op,
                  .infer = infer_binary_legacy_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "Equal",
                  .kernel = equal_op,
                  .infer = infer_binary_legacy_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "Less",
                  .kernel = less_op,
                  .infer = infer_binary_legacy_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "Greater",
                  .kernel = greater_op,
                  .infer = infer_binary_legacy_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "LessOrEqual",
                  .kernel = less_equal_op,
                  .infer = infer_broadcast_bool,
                  .traits = {.pointwise = Pointwise::Binary}});
KILN_REGISTER_OP({.op_type = "GreaterOrEqual",
                  .kernel = greater_equal_op,
                  .infer = infer_broadcast_bool,
                  .traits = {.pointwise = Pointwise::Binary}});

}  // namespace
}  // namespace kiln::ops
