// Add, Sub, Mul, Div: numpy-broadcasting arithmetic over every numeric type.
#include "ops/elementwise_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/point_ops.hpp"
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

// The math is the point functions' (src/ops/point_ops.hpp); only the error a point function
// cannot raise stays here.
struct AddOp {
  template <typename T>
  static T apply(const KernelContext&, T x, T y) {
    return point::add(x, y);
  }
};
struct SubOp {
  template <typename T>
  static T apply(const KernelContext&, T x, T y) {
    return point::sub(x, y);
  }
};
struct MulOp {
  template <typename T>
  static T apply(const KernelContext&, T x, T y) {
    return point::mul(x, y);
  }
};
struct DivOp {
  template <typename T>
  static T apply(const KernelContext& ctx, T x, T y) {
    if constexpr (std::is_integral_v<T>) ctx.check(y != 0, "integer division by zero");
    return point::div(x, y);
  }
};

KILN_REGISTER_OP({.op_type = "Add",
                  .kernel = arithmetic<AddOp>,
                  .infer = infer_binary_legacy_same,
                  .traits = {
                      .pointwise = Pointwise::Binary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Sub",
                  .kernel = arithmetic<SubOp>,
                  .infer = infer_binary_legacy_same,
                  .traits = {
                      .pointwise = Pointwise::Binary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Mul",
                  .kernel = arithmetic<MulOp>,
                  .infer = infer_binary_legacy_same,
                  .traits = {
                      .pointwise = Pointwise::Binary, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Div",
                  .kernel = arithmetic<DivOp>,
                  .infer = infer_binary_legacy_same,
                  .traits = {
                      .pointwise = Pointwise::Binary, .fp16 = {.safe = true}, .transposes = true}});

}  // namespace
}  // namespace kiln::ops
