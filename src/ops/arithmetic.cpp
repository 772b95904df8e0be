// Add, Sub, Mul, Div: numpy-broadcasting arithmetic over every numeric type.
#include "ops/elementwise_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

template <typename Op>
void arithmetic(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  // Opset < 7 models may use the "broadcast"/"axis" attributes instead of numpy broadcasting.
  const Tensor b = legacy_broadcast_operand(ctx, a, ctx.input(1));
  ctx.check(a.dtype() == b.dtype(), "operand types differ: {} vs {}", dtype_name(a.dtype()),
            dtype_name(b.dtype()));
  ctx.set_output(0,
                 dispatch_dtype<DTypeSet::Numeric>(a.dtype(), ctx.node().op_type(), [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return broadcast_binary<T, T, T>(
                       ctx, a, b, [&](T x, T y) { return Op::template apply<T>(ctx, x, y); });
                 }));
}

struct AddOp {
  template <typename T>
  static T apply(const KernelContext&, T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;  // wrap around like hardware, without UB
      return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    } else {
      return T(x + y);
    }
  }
};
struct SubOp {
  template <typename T>
  static T apply(const KernelContext&, T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
    } else {
      return T(x - y);
    }
  }
};
struct MulOp {
  template <typename T>
  static T apply(const KernelContext&, T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      // uint64 product: narrower unsigned types would promote to int and could overflow (UB).
      return static_cast<T>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
    } else {
      return T(x * y);
    }
  }
};
struct DivOp {
  template <typename T>
  static T apply(const KernelContext& ctx, T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      ctx.check(y != 0, "integer division by zero");
      if constexpr (std::is_signed_v<T>) {
        if (x == std::numeric_limits<T>::min() && y == T(-1)) return x;  // overflow wraps
      }
      return static_cast<T>(x / y);
    } else {
      return T(x / y);
    }
  }
};

KILN_REGISTER_OP({.op_type = "Add",
                  .kernel = arithmetic<AddOp>,
                  .infer = infer_binary_legacy_same});
KILN_REGISTER_OP({.op_type = "Sub",
                  .kernel = arithmetic<SubOp>,
                  .infer = infer_binary_legacy_same});
KILN_REGISTER_OP({.op_type = "Mul",
                  .kernel = arithmetic<MulOp>,
                  .infer = infer_binary_legacy_same});
KILN_REGISTER_OP({.op_type = "Div",
                  .kernel = arithmetic<DivOp>,
                  .infer = infer_binary_legacy_same});

}  // namespace
}  // namespace kiln::ops
