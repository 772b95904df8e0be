// Softmax, LogSoftmax, Hardmax (along one axis, or over a 2-D coercion before opset 13),
// CumSum/CumProd (exclusive, reverse) and TopK (ties broken by the lower index).
#include <algorithm>
#include <limits>
#include <numeric>

#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/reduce_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace reduction;  // NOLINT: this family's own helpers

enum class SoftKind { Softmax, LogSoftmax, Hardmax };

// Before opset 13 the input is viewed as [prod(dims[:axis]), prod(dims[axis:])] and each row is
// normalized; from 13 on only `axis` is normalized.
AxisSplit softmax_split(const KernelContext& ctx, const Tensor& x) {
  const int64_t rank = static_cast<int64_t>(x.rank());
  const bool coerce = ctx.opset() < 13;
  int64_t axis = ctx.attr_int("axis", coerce ? 1 : -1);
  if (coerce) {
    // The 2-D coercion accepts axis == rank (an empty second factor); a scalar is one row.
    int64_t a = axis < 0 ? axis + rank : axis;
    ctx.check(a >= 0 && a <= rank, "axis {} is out of range for rank {}", axis, rank);
    AxisSplit s;
    s.outer = dims_product(x.dims(), 0, static_cast<size_t>(a));
    s.length = dims_product(x.dims(), static_cast<size_t>(a), x.rank());
    return s;
  }
  ctx.check(rank >= 1, "input must have rank >= 1");
  return split_at_axis(x.dims(), static_cast<size_t>(normalize_axis(ctx, axis, rank)));
}

template <SoftKind K>
void softmax(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  AxisSplit s = softmax_split(ctx, x);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), ctx.node().op_type(), [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor out(x.dtype(), x.dims());
                   const T* px = x.data<T>();
                   T* po = out.data<T>();
                   std::vector<double> row(static_cast<size_t>(s.length));
                   for (int64_t o = 0; o < s.outer; ++o) {
                     for (int64_t in = 0; in < s.inner; ++in) {
                       const int64_t base = o * s.length * s.inner + in;
                       double mx = -std::numeric_limits<double>::infinity();
                       int64_t arg = 0;
                       for (int64_t k = 0; k < s.length; ++k) {
                         double v = to_double(px[base + k * s.inner]);
                         row[static_cast<size_t>(k)] = v;
                         if (v > mx || (std::isnan(v) && !std::isnan(mx))) {
                           mx = v;
                           arg = k;
                         }
                       }
                       if constexpr (K == SoftKind::Hardmax) {
                         for (int64_t k = 0; k < s.length; ++k)
                           po[base + k * s.inner] = T(k == arg ? 1.0f : 0.0f);
                         continue;
                       }
                       // An all -inf row would give -inf - -inf = NaN; numpy does the same, so keep
                       // it.
                       double sum = 0;
                       for (double v : row) sum += std::exp(v - mx);
                       for (int64_t k = 0; k < s.length; ++k) {
                         double d = row[static_cast<size_t>(k)] - mx;
                         double r = K == SoftKind::Softmax ? std::exp(d) / sum : d - std::log(sum);
                         po[base + k * s.inner] = from_double<T>(r);
                       }
                     }
                   }
                   return out;
                 }));
}

template <bool IsProd>
void cumulative(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& axis_t = ctx.input(1);
  ctx.check(axis_t.dtype() == DataType::Int32 || axis_t.dtype() == DataType::Int64,
            "axis must be int32 or int64, got {}", dtype_name(axis_t.dtype()));
  ctx.check(axis_t.numel() == 1 && axis_t.rank() <= 1, "axis must be a scalar, got {}",
            axis_t.describe());
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, axis_t.int_at(0), rank));
  const bool exclusive = ctx.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.attr_int("reverse", 0) != 0;
  AxisSplit s = split_at_axis(x.dims(), axis);
  ctx.set_output(0,
                 dispatch_dtype<DTypeSet::Numeric>(x.dtype(), ctx.node().op_type(), [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   // Integers wrap like hardware; floats accumulate in double and round once per
                   // element. (uint64 rather than T's own unsigned type: uint16 would promote to
                   // int and overflow.)
                   using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
                   Tensor out(x.dtype(), x.dims());
                   const T* px = x.data<T>();
                   T* po = out.data<T>();
                   for (int64_t o = 0; o < s.outer; ++o) {
                     for (int64_t in = 0; in < s.inner; ++in) {
                       Acc acc = IsProd ? Acc(1) : Acc(0);
                       for (int64_t j = 0; j < s.length; ++j) {
                         int64_t k = reverse ? s.length - 1 - j : j;
                         int64_t idx = (o * s.length + k) * s.inner + in;
                         Acc v;
                         if constexpr (std::is_integral_v<T>)
                           v = static_cast<Acc>(px[idx]);
                         else
                           v = to_double(px[idx]);
                         if (!exclusive) acc = IsProd ? Acc(acc * v) : Acc(acc + v);
                         if constexpr (std::is_integral_v<T>)
                           po[idx] = static_cast<T>(acc);
                         else
                           po[idx] = from_double<T>(acc);
                         if (exclusive) acc = IsProd ? Acc(acc * v) : Acc(acc + v);
                       }
                     }
                   }
                   return out;
                 }));
}

void topk(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
  int64_t k;
  if (ctx.opset() < 10) {
    k = ctx.attr_int("k");
  } else {
    const Tensor& kt = ctx.input(1);
    ctx.check(kt.dtype() == DataType::Int64 && kt.numel() == 1 && kt.rank() <= 1,
              "K must be a 1-element int64 tensor, got {}", kt.describe());
    k = kt.int_at(0);
  }
  const bool largest = ctx.opset() < 11 || ctx.attr_int("largest", 1) != 0;
  // sorted=0 leaves the order unspecified, so the sorted order is a valid answer too.
  AxisSplit s = split_at_axis(x.dims(), axis);
  ctx.check(k >= 0 && k <= s.length, "k = {} is out of range for axis of length {}", k, s.length);
  std::vector<int64_t> out_dims = x.dims();
  out_dims[axis] = k;
  Tensor indices(DataType::Int64, out_dims);
  int64_t* pi = indices.data<int64_t>();
  Tensor values = dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "TopK", [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out(x.dtype(), out_dims);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    std::vector<int64_t> order(static_cast<size_t>(s.length));
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t in = 0; in < s.inner; ++in) {
        const T* base = px + o * s.length * s.inner + in;
        // NaN sorts as the largest value, like numpy; equal values keep index order.
        auto key_less = [&](int64_t a, int64_t b) {
          if constexpr (kIsFloatLike<T>) {
            double va = to_double(base[a * s.inner]), vb = to_double(base[b * s.inner]);
            if (std::isnan(va) || std::isnan(vb)) return !std::isnan(va) && std::isnan(vb);
            return va < vb;
          } else {
            return base[a * s.inner] < base[b * s.inner];
          }
        };
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? key_less(b, a) : key_less(a, b);
        });
        for (int64_t j = 0; j < k; ++j) {
          int64_t idx = (o * k + j) * s.inner + in;
          int64_t src = order[static_cast<size_t>(j)];
          po[idx] = base[src * s.inner];
          pi[idx] = src;
        }
      }
    }
    return out;
  });
  ctx.set_output(0, values);
  if (ctx.wants_output(1)) ctx.set_output(1, indices);
}

void infer_topk(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) return;
  std::optional<Shape> shape;
  if (t->shape && t->shape->rank() >= 1) {
    const int64_t rank = static_cast<int64_t>(t->shape->rank());
    const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
    std::vector<Dim> dims = t->shape->dims();
    dims[axis] = Dim();
    if (ctx.opset() < 10) {
      dims[axis] = Dim(ctx.attr_int("k"));
    } else if (const Tensor* kt = ctx.input_constant(1); kt && kt->numel() == 1) {
      dims[axis] = Dim(kt->int_at(0));
    }
    shape = Shape(std::move(dims));
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, shape));
  if (ctx.output_count() > 1) ctx.set_output_type(1, TypeInfo::tensor(DataType::Int64, shape));
}

KILN_REGISTER_OP({.op_type = "Softmax",
                  .kernel = softmax<SoftKind::Softmax>,
                  .infer = infer_same_as_input0,
                  .traits = {.fp16 = {.safe = true}}});
KILN_REGISTER_OP({.op_type = "LogSoftmax",
                  .kernel = softmax<SoftKind::LogSoftmax>,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "Hardmax",
                  .kernel = softmax<SoftKind::Hardmax>,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "CumSum", .kernel = cumulative<false>, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "CumProd", .kernel = cumulative<true>, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "TopK",
                  .kernel = topk,
                  .infer = infer_topk,
                  .traits = {.shape_inputs = slots({1})}});

}  // namespace
}  // namespace kiln::ops
