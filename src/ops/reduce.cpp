// ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin.
// Axes come from an attribute before opset 13 (ReduceSum) / 18 (the others) and from an optional
// second input afterwards, where noop_with_empty_axes decides what "no axes" means.
#include <algorithm>
#include <limits>

#include "ops/infer_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/reduce_axes.hpp"
#include "ops/reduce_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace reduction;  // NOLINT: this family's own helpers

enum class Kind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

ReduceAxes kernel_axes(const KernelContext& ctx, size_t rank) {
  if (ctx.opset() >= axes_input_since(ctx.node().op_type())) {
    ctx.check(!ctx.has_attr("axes"), "axes is an input since opset {}, not an attribute",
              axes_input_since(ctx.node().op_type()));
    std::vector<int64_t> axes;
    if (ctx.has_input(1)) {
      const Tensor& t = ctx.input(1);
      ctx.check(t.dtype() == DataType::Int64, "axes must be int64, got {}", dtype_name(t.dtype()));
      ctx.check(t.rank() <= 1, "axes must be 1-D, got {}", t.describe());
      axes = t.to_int64_vector();
    }
    return resolve_axes(ctx, rank, axes, ctx.attr_int("noop_with_empty_axes", 0) != 0);
  }
  return resolve_axes(ctx, rank, ctx.attr_ints("axes", {}), false);
}

// Integers sum and multiply exactly with wrap-around; everything else goes through double.
template <typename T, Kind K>
using ReduceAcc =
    std::conditional_t<std::is_integral_v<T> && (K == Kind::Sum || K == Kind::Prod ||
                                                 K == Kind::L1 || K == Kind::SumSquare),
                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>, double>;

template <typename T, Kind K>
Tensor reduce_typed(const KernelContext& ctx, const Tensor& x, const ReduceAxes& r) {
  const std::vector<int64_t>& dims = x.dims();
  std::vector<int64_t> out_dims = reduced_dims(dims, r);
  Tensor out(x.dtype(), out_dims);
  const int64_t out_n = out.numel();
  const T* px = x.data<T>();
  T* po = out.data<T>();
  int64_t count = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (r.reduced[i]) count *= dims[i];
  }
  (void)ctx;

  if constexpr (K == Kind::Max || K == Kind::Min) {
    // Compared in T itself so integers stay exact; NaN propagates like numpy.
    T init;
    if constexpr (std::is_same_v<T, bool>) {
      init = K != Kind::Max;
    } else if constexpr (kIsFloatLike<T>) {
      init = T(K == Kind::Max ? -std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::infinity());
    } else {
      init = K == Kind::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
    std::fill_n(po, out_n, init);
    for_each_reduced(dims, r.reduced, [&](int64_t i, int64_t o) {
      T v = px[i];
      T& a = po[o];
      if constexpr (kIsFloatLike<T>) {
        if (std::isnan(static_cast<double>(to_double(a)))) return;
        if (std::isnan(to_double(v))) {
          a = v;
          return;
        }
        if (K == Kind::Max ? to_double(v) > to_double(a) : to_double(v) < to_double(a)) a = v;
      } else {
        if (K == Kind::Max ? v > a : v < a) a = v;
      }
    });
    return out;
  } else {
    using Acc = ReduceAcc<T, K>;
    std::vector<double> shift;
    if constexpr (K == Kind::LogSumExp) {
      // Subtract the per-slot max before exponentiating so large inputs do not overflow.
      shift.assign(static_cast<size_t>(out_n), -std::numeric_limits<double>::infinity());
      for_each_reduced(dims, r.reduced, [&](int64_t i, int64_t o) {
        shift[static_cast<size_t>(o)] = std::max(shift[static_cast<size_t>(o)], to_double(px[i]));
      });
      for (double& s : shift) {
        if (std::isinf(s)) s = 0;
      }
    }
    std::vector<Acc> acc(static_cast<size_t>(out_n), K == Kind::Prod ? Acc(1) : Acc(0));
    for_each_reduced(dims, r.reduced, [&](int64_t i, int64_t o) {
      Acc& a = acc[static_cast<size_t>(o)];
      if constexpr (std::is_integral_v<Acc>) {
        using U = std::make_unsigned_t<Acc>;
        U v = static_cast<U>(static_cast<Acc>(px[i]));
        if constexpr (K == Kind::L1) {
          if constexpr (std::is_signed_v<T>) {
            if (px[i] < 0) v = U(0) - v;
          }
        }
        if constexpr (K == Kind::Prod) {
          a = static_cast<Acc>(static_cast<U>(a) * v);
        } else if constexpr (K == Kind::SumSquare) {
          a = static_cast<Acc>(static_cast<U>(a) + v * v);
        } else {
          a = static_cast<Acc>(static_cast<U>(a) + v);
        }
      } else {
        double v = to_double(px[i]);
        switch (K) {
          case Kind::Prod:
            a *= v;
            break;
          case Kind::L1:
            a += std::fabs(v);
            break;
          case Kind::L2:
          case Kind::SumSquare:
            a += v * v;
            break;
          case Kind::LogSumExp:
            a += std::exp(v - shift[static_cast<size_t>(o)]);
            break;
          default:
            a += v;
        }
      }
    });
    for (int64_t o = 0; o < out_n; ++o) {
      Acc a = acc[static_cast<size_t>(o)];
      if constexpr (std::is_integral_v<Acc>) {
        po[o] = static_cast<T>(a);
      } else {
        double v = a;
        if (K == Kind::Mean) v = v / static_cast<double>(count);
        if (K == Kind::L2) v = std::sqrt(v);
        if (K == Kind::LogSum) v = std::log(v);
        if (K == Kind::LogSumExp) v = std::log(v) + shift[static_cast<size_t>(o)];
        po[o] = from_double<T>(v);
      }
    }
    return out;
  }
}

template <Kind K>
void reduce(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ReduceAxes r = kernel_axes(ctx, x.rank());
  const std::string& op = ctx.node().op_type();
  constexpr bool with_bool = K == Kind::Max || K == Kind::Min;
  if (x.dtype() == DataType::Bool) {
    if (!with_bool || ctx.opset() < 20) ctx.unsupported("{} does not take bool input", op);
  }
  ctx.set_output(0, dispatch_dtype<DTypeSet::NumericBool>(x.dtype(), op, [&](auto tag) -> Tensor {
                   using T = typename decltype(tag)::type;
                   if constexpr (std::is_same_v<T, bool> && !with_bool) {
                     ctx.unsupported("{} does not take bool input", op);
                   } else {
                     return reduce_typed<T, K>(ctx, x, r);
                   }
                 }));
}

// Output type of a Reduce node: same element type; shape when the axes are known statically.
void infer_reduce_impl(InferContext& ctx, DataType out_type) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) return;
  DataType dtype = out_type == DataType::Undefined ? t->dtype : out_type;
  if (!t->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(dtype));
    return;
  }
  const size_t rank = t->shape->rank();
  std::optional<ReduceAxes> r;
  bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  const std::string& op = ctx.node().op_type();
  if (op == "ArgMax" || op == "ArgMin") {
    ReduceAxes a;
    a.keepdims = keepdims;
    a.reduced.assign(rank, false);
    if (rank > 0) a.reduced[normalize_axis(ctx, ctx.attr_int("axis", 0), rank)] = true;
    r = a;
  } else if (ctx.opset() >= axes_input_since(op)) {
    bool noop = ctx.attr_int("noop_with_empty_axes", 0) != 0;
    if (!ctx.has_input(1)) {
      r = resolve_axes(ctx, rank, {}, noop);
    } else if (const Tensor* c = ctx.input_constant(1)) {
      r = resolve_axes(ctx, rank, c->to_int64_vector(), noop);
    }
  } else {
    r = resolve_axes(ctx, rank, ctx.attr_ints("axes", {}), false);
  }
  if (!r) {
    if (!keepdims) {
      ctx.set_output_type(0, TypeInfo::tensor(dtype));
    } else {
      ctx.set_output_type(0, TypeInfo::tensor(dtype, Shape(std::vector<Dim>(rank))));
    }
    return;
  }
  std::vector<Dim> dims;
  for (size_t i = 0; i < rank; ++i) {
    if (!r->reduced[i])
      dims.push_back((*t->shape)[i]);
    else if (r->keepdims)
      dims.push_back(Dim(1));
  }
  ctx.set_output_type(0, TypeInfo::tensor(dtype, Shape(std::move(dims))));
}

void infer_reduce(InferContext& ctx) {
  infer_reduce_impl(ctx, DataType::Undefined);
}
void infer_arg_reduce(InferContext& ctx) {
  infer_reduce_impl(ctx, DataType::Int64);
}

template <bool IsMax>
void arg_reduce(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), rank));
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  const bool last = ctx.opset() >= 12 && ctx.attr_int("select_last_index", 0) != 0;
  AxisSplit s = split_at_axis(x.dims(), axis);
  ctx.check(s.length > 0 || s.outer * s.inner == 0, "cannot reduce over the empty axis {}", axis);
  std::vector<int64_t> out_dims = x.dims();
  if (keepdims)
    out_dims[axis] = 1;
  else
    out_dims.erase(out_dims.begin() + static_cast<int64_t>(axis));
  Tensor out(DataType::Int64, out_dims);
  int64_t* po = out.data<int64_t>();
  dispatch_dtype<DTypeSet::NumericBool>(x.dtype(), ctx.node().op_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    // true when v should replace the current best b (NaN counts as the extreme, like numpy).
    auto better = [&](T v, T b) {
      if constexpr (kIsFloatLike<T>) {
        double dv = to_double(v), db = to_double(b);
        if (std::isnan(db)) return false;
        if (std::isnan(dv)) return true;
        return IsMax ? (last ? dv >= db : dv > db) : (last ? dv <= db : dv < db);
      } else {
        return IsMax ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
      }
    };
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t in = 0; in < s.inner; ++in) {
        const T* base = px + o * s.length * s.inner + in;
        int64_t best = 0;
        for (int64_t k = 1; k < s.length; ++k) {
          if (better(base[k * s.inner], base[best * s.inner])) best = k;
        }
        po[o * s.inner + in] = best;
      }
    }
    return 0;
  });
  ctx.set_output(0, out);
}

KILN_REGISTER_OP({.op_type = "ReduceSum",
                  .kernel = reduce<Kind::Sum>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP(
    {.op_type = "ReduceMean",
     .kernel = reduce<Kind::Mean>,
     .infer = infer_reduce,
     .traits = {.shape_inputs = slots({1}), .fp16 = {.safe = true}, .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceMax",
                  .kernel = reduce<Kind::Max>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceMin",
                  .kernel = reduce<Kind::Min>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceProd",
                  .kernel = reduce<Kind::Prod>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceL1",
                  .kernel = reduce<Kind::L1>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceL2",
                  .kernel = reduce<Kind::L2>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceLogSum",
                  .kernel = reduce<Kind::LogSum>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceLogSumExp",
                  .kernel = reduce<Kind::LogSumExp>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ReduceSumSquare",
                  .kernel = reduce<Kind::SumSquare>,
                  .infer = infer_reduce,
                  .traits = {.shape_inputs = slots({1}), .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ArgMax",
                  .kernel = arg_reduce<true>,
                  .infer = infer_arg_reduce,
                  .traits = {.flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "ArgMin",
                  .kernel = arg_reduce<false>,
                  .infer = infer_arg_reduce,
                  .traits = {.flops = flops_per_input}});

}  // namespace
}  // namespace kiln::ops
