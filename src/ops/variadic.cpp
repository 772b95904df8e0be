// Variadic element-wise reductions over inputs (Max, Min, Sum, Mean) and Where.
#include <cmath>

#include "ops/elementwise_utils.hpp"
#include "ops/point_ops.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

enum class Combine { Max, Min, Sum, Mean };

// Folds all inputs under numpy broadcasting. Floats accumulate in double and round once; Max and
// Min propagate NaN like numpy's maximum/minimum.
template <Combine C>
void variadic_op(KernelContext& ctx) {
  const size_t n = ctx.input_count();
  ctx.check(n >= 1, "needs at least one input");
  std::vector<std::vector<int64_t>> shapes;
  const DataType type = ctx.input(0).dtype();
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    ctx.check(t.dtype() == type, "input {} has type {}, expected {}", i, dtype_name(t.dtype()),
              dtype_name(type));
    shapes.push_back(t.dims());
  }
  std::vector<int64_t> out_dims = broadcast_dims(ctx, shapes);
  constexpr DTypeSet kSet =
      (C == Combine::Sum || C == Combine::Mean) ? DTypeSet::Float : DTypeSet::Numeric;
  ctx.set_output(
      0, dispatch_dtype<kSet>(type, ctx.node().op_type(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Floats accumulate as double, integers in their own type.
        using Acc = std::conditional_t<is_float_v<T>, double, T>;
        const int64_t total = shape_numel(out_dims);
        std::vector<Acc> acc(static_cast<size_t>(total));
        for (size_t k = 0; k < n; ++k) {
          const Tensor& t = ctx.input(k);
          const T* p = t.data<T>();
          std::array<std::vector<int64_t>, 1> strides = {broadcast_strides(t.dims(), out_dims)};
          for_each_broadcast<1>(out_dims, strides,
                                [&](int64_t i, const std::array<int64_t, 1>& off) {
                                  Acc v;
                                  if constexpr (is_float_v<T>) {
                                    v = to_double(p[off[0]]);
                                  } else {
                                    v = p[off[0]];
                                  }
                                  Acc& a = acc[static_cast<size_t>(i)];
                                  if (k == 0) {
                                    a = v;
                                    return;
                                  }
                                  if constexpr (C == Combine::Max) {
                                    a = point::maximum(a, v);
                                  } else if constexpr (C == Combine::Min) {
                                    a = point::minimum(a, v);
                                  } else {
                                    a += v;
                                  }
                                });
        }
        Tensor out(dtype_of<T>, out_dims);
        T* po = out.data<T>();
        for (int64_t i = 0; i < total; ++i) {
          Acc a = acc[static_cast<size_t>(i)];
          if constexpr (C == Combine::Mean) a /= static_cast<double>(n);
          if constexpr (is_float_v<T>) {
            po[i] = from_double<T>(a);
          } else {
            po[i] = a;
          }
        }
        return out;
      }));
}

void where_op(KernelContext& ctx) {
  const Tensor& cond = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  ctx.check(cond.dtype() == DataType::Bool, "condition must be bool, got {}",
            dtype_name(cond.dtype()));
  ctx.check(x.dtype() == y.dtype(), "X and Y types differ: {} vs {}", dtype_name(x.dtype()),
            dtype_name(y.dtype()));
  std::vector<int64_t> out_dims = broadcast_dims(ctx, {cond.dims(), x.dims(), y.dims()});
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::All>(x.dtype(), "Where", [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor out(dtype_of<T>, out_dims);
        const bool* pc = cond.data<bool>();
        const T* px = x.data<T>();
        const T* py = y.data<T>();
        T* po = out.data<T>();
        std::array<std::vector<int64_t>, 3> strides = {broadcast_strides(cond.dims(), out_dims),
                                                       broadcast_strides(x.dims(), out_dims),
                                                       broadcast_strides(y.dims(), out_dims)};
        for_each_broadcast<3>(out_dims, strides, [&](int64_t i, const std::array<int64_t, 3>& off) {
          po[i] = pc[off[0]] ? px[off[1]] : py[off[2]];
        });
        return out;
      }));
}

void infer_where(InferContext& ctx) {
  const TypeInfo* c = ctx.input_type(0);
  const TypeInfo* x = ctx.input_type(1);
  const TypeInfo* y = ctx.input_type(2);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (c && c->is_tensor() && y && y->is_tensor()) {
    shape = broadcast_shapes(ctx, broadcast_shapes(ctx, c->shape, x->shape), y->shape);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP(
    {.op_type = "Max",
     .kernel = variadic_op<Combine::Max>,
     .infer = infer_broadcast,
     .traits = {.pointwise = Pointwise::Variadic, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP(
    {.op_type = "Min",
     .kernel = variadic_op<Combine::Min>,
     .infer = infer_broadcast,
     .traits = {.pointwise = Pointwise::Variadic, .fp16 = {.safe = true}, .transposes = true}});
KILN_REGISTER_OP({.op_type = "Sum",
                  .kernel = variadic_op<Combine::Sum>,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Variadic}});
KILN_REGISTER_OP({.op_type = "Mean",
                  .kernel = variadic_op<Combine::Mean>,
                  .infer = infer_broadcast,
                  .traits = {.pointwise = Pointwise::Variadic}});
KILN_REGISTER_OP({.op_type = "Where",
                  .kernel = where_op,
                  .infer = infer_where,
                  .traits = {.fp16 = {.safe = true}}});

}  // namespace
}  // namespace kiln::ops
