#include "ops/elementwise_utils.hpp"

#include "core/shape.hpp"

namespace kiln::ops {

Tensor legacy_broadcast_operand(const KernelContext& ctx, const Tensor& a, const Tensor& b) {
  if (ctx.opset() >= 7) return b;
  if (ctx.attr_int("broadcast", 0) == 0) {
    ctx.check(a.dims() == b.dims(),
              "shapes {} and {} differ and broadcast is not enabled (opset {} needs broadcast=1)",
              dims_to_string(a.dims()), dims_to_string(b.dims()), ctx.opset());
    return b;
  }
  const int64_t rank_a = static_cast<int64_t>(a.rank());
  const int64_t rank_b = static_cast<int64_t>(b.rank());
  ctx.check(rank_b <= rank_a, "broadcast operand B {} has higher rank than A {}",
            dims_to_string(b.dims()), dims_to_string(a.dims()));
  int64_t axis = rank_a - rank_b;
  if (ctx.has_attr("axis")) {
    axis = ctx.attr_int("axis");
    if (axis < 0) axis += rank_a;
    ctx.check(axis >= 0 && axis + rank_b <= rank_a, "axis {} does not fit B {} into A {}",
              ctx.attr_int("axis"), dims_to_string(b.dims()), dims_to_string(a.dims()));
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank_a), 1);
  for (int64_t i = 0; i < rank_b; ++i) {
    int64_t d = b.dim(static_cast<size_t>(i));
    int64_t target = a.dim(static_cast<size_t>(axis + i));
    ctx.check(d == target || d == 1, "B {} cannot be broadcast to A {} at axis {}",
              dims_to_string(b.dims()), dims_to_string(a.dims()), axis);
    dims[static_cast<size_t>(axis + i)] = d;
  }
  return b.reshaped(std::move(dims));
}

void infer_binary_legacy(InferContext& ctx, bool bool_out) {
  if (ctx.opset() >= 7) {
    if (bool_out) {
      infer_broadcast_bool(ctx);
    } else {
      infer_broadcast(ctx);
    }
    return;
  }
  const TypeInfo* a = ctx.input_type(0);
  if (!a || !a->is_tensor()) return;
  ctx.set_output_type(0, TypeInfo::tensor(bool_out ? DataType::Bool : a->dtype, a->shape));
}

void infer_same_shape_as(InferContext& ctx, DataType dtype) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) {
    ctx.set_output_type(0, TypeInfo::tensor(dtype));
    return;
  }
  ctx.set_output_type(0, TypeInfo::tensor(dtype, t->shape));
}

}  // namespace kiln::ops
