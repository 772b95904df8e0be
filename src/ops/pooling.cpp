// MaxPool, AveragePool, LpPool, their Global forms, and MaxUnpool.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

enum class PoolKind { Max, Average, Lp };

// Spatial taps of one window, classified once per output position and shared by all planes.
struct WindowTaps {
  std::vector<int64_t> real;        // flat spatial offsets of taps inside the input
  std::vector<int64_t> real_index;  // the same taps as storage_order=1 (column-major) offsets
  int64_t padded = 0;  // taps inside input + explicit padding (count_include_pad divisor)
};

// Calls fn(output_position, taps) for every output position of the geometry.
template <typename Fn>
void for_each_window(const WindowGeometry& g, Fn&& fn) {
  const size_t nsp = g.nsp;
  const int64_t k_size = product(g.kernel), out_size = product(g.out);
  const std::vector<int64_t> strides = row_major_strides(g.in);
  std::vector<int64_t> col_strides(nsp, 1);  // column-major strides for storage_order=1
  for (size_t d = 1; d < nsp; ++d) col_strides[d] = col_strides[d - 1] * g.in[d - 1];
  std::vector<int64_t> o(nsp, 0), k(nsp), base(nsp);
  WindowTaps taps;
  for (int64_t op = 0; op < out_size; ++op, next_index(o, g.out)) {
    for (size_t d = 0; d < nsp; ++d) base[d] = o[d] * g.strides[d] - g.pad_begin(d);
    taps.real.clear();
    taps.real_index.clear();
    taps.padded = 0;
    std::fill(k.begin(), k.end(), 0);
    for (int64_t t = 0; t < k_size; ++t, next_index(k, g.kernel)) {
      bool inside = true, in_pad = true;
      int64_t off = 0, col = 0;
      for (size_t d = 0; d < nsp; ++d) {
        const int64_t p = base[d] + k[d] * g.dilations[d];
        inside = inside && p >= 0 && p < g.in[d];
        in_pad = in_pad && p < g.in[d] + g.pad_end(d);
        off += p * strides[d];
        col += p * col_strides[d];
      }
      if (in_pad) ++taps.padded;
      if (inside) {
        taps.real.push_back(off);
        taps.real_index.push_back(col);
      }
    }
    fn(op, taps);
  }
}

// Kernel shape from the attribute (required for windowed pools).
std::vector<int64_t> pool_kernel(const AttrReader& ctx) {
  ctx.check(ctx.has_attr("kernel_shape"), "kernel_shape is required");
  return ctx.attr_ints("kernel_shape");
}

bool pool_ceil_mode(const AttrReader& ctx) {
  int64_t c = ctx.attr_int("ceil_mode", 0);
  ctx.check(c == 0 || c == 1, "ceil_mode must be 0 or 1, got {}", c);
  return c == 1;
}

double lp_p(const AttrReader& ctx) {
  // LpPool-1 / GlobalLpPool-1 declare p as a float, later versions as an int; accept either.
  const ir::Attribute* attr = ctx.node().attribute("p");
  double p = 2.0;
  if (attr) {
    p = attr->kind() == ir::AttrKind::Float ? static_cast<double>(ctx.attr_float("p"))
                                            : static_cast<double>(ctx.attr_int("p"));
  }
  ctx.check(p > 0 && std::isfinite(p), "p must be positive, got {}", p);
  return p;
}

template <PoolKind Kind>
void pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 3, "X must have rank >= 3 (N, C, spatial...), got {}", x.describe());
  std::vector<int64_t> kernel = pool_kernel(ctx);
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  ctx.check(kernel.size() == in.size(), "kernel_shape has {} dims but X has {} spatial dims",
            kernel.size(), in.size());
  WindowGeometry g = forward_geometry(ctx, in, kernel, pool_ceil_mode(ctx));
  const int64_t planes = x.dim(0) * x.dim(1), in_size = product(in), out_size = product(g.out);
  std::vector<int64_t> out_dims = {x.dim(0), x.dim(1)};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  const bool count_pad = ctx.attr_int("count_include_pad", 0) != 0;
  const int64_t storage_order = ctx.attr_int("storage_order", 0);
  ctx.check(storage_order == 0 || storage_order == 1, "storage_order must be 0 or 1");
  const bool want_indices = Kind == PoolKind::Max && ctx.wants_output(1);
  Tensor indices;
  if (want_indices) indices = Tensor(DataType::Int64, out_dims);
  const double p = Kind == PoolKind::Lp ? lp_p(ctx) : 1.0;
  constexpr DTypeSet kSet = Kind == PoolKind::Max ? DTypeSet::Numeric : DTypeSet::Float;
  ctx.set_output(0, dispatch_dtype<kSet>(x.dtype(), ctx.node().op_type(), [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   const T* px = x.data<T>();
                   Tensor y(x.dtype(), out_dims);
                   T* py = y.data<T>();
                   int64_t* pi = want_indices ? indices.data<int64_t>() : nullptr;
                   for_each_window(g, [&](int64_t op, const WindowTaps& taps) {
                     for (int64_t plane = 0; plane < planes; ++plane) {
                       const T* xp = px + plane * in_size;
                       const int64_t o = plane * out_size + op;
                       if constexpr (Kind == PoolKind::Max) {
                         // A window entirely in padding has no element: it yields the lowest value.
                         T best = std::numeric_limits<T>::lowest();
                         if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>)
                           best = T(-std::numeric_limits<float>::infinity());
                         int64_t best_i = -1;
                         for (size_t t = 0; t < taps.real.size(); ++t) {
                           const T v = xp[taps.real[t]];
                           if (best_i < 0 || static_cast<double>(v) > static_cast<double>(best)) {
                             best = v;
                             best_i = static_cast<int64_t>(t);
                           }
                         }
                         py[o] = best;
                         if (pi) {
                           const auto& offs = storage_order == 0 ? taps.real : taps.real_index;
                           pi[o] = best_i < 0 ? -1 : plane * in_size + offs[best_i];
                         }
                       } else if constexpr (Kind == PoolKind::Average) {
                         using Acc = double;
                         Acc sum = 0;
                         for (int64_t off : taps.real) sum += static_cast<Acc>(xp[off]);
                         const int64_t n =
                             count_pad ? taps.padded : static_cast<int64_t>(taps.real.size());
                         py[o] = static_cast<T>(n > 0 ? sum / static_cast<Acc>(n) : Acc(0));
                       } else {
                         double sum = 0;
                         for (int64_t off : taps.real)
                           sum += std::pow(std::fabs(static_cast<double>(xp[off])), p);
                         py[o] = static_cast<T>(std::pow(sum, 1.0 / p));
                       }
                     }
                   });
                   return y;
                 }));
  if (want_indices) ctx.set_output(1, indices);
}

void infer_pool(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor() || !ctx.has_attr("kernel_shape")) return;
  std::optional<Shape> shape;
  if (x->shape) {
    ctx.check(x->shape->rank() >= 3, "X must have rank >= 3, got {}", x->shape->rank());
    shape = window_output_shape(ctx, x->shape, (*x->shape)[1], ctx.attr_ints("kernel_shape"),
                                pool_ceil_mode(ctx));
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
  if (ctx.output_count() > 1) ctx.set_output_type(1, TypeInfo::tensor(DataType::Int64, shape));
}

template <PoolKind Kind>
void global_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 3, "X must have rank >= 3 (N, C, spatial...), got {}", x.describe());
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t size = planes == 0 ? 0 : x.numel() / planes;
  std::vector<int64_t> out_dims(x.rank(), 1);
  out_dims[0] = x.dim(0);
  out_dims[1] = x.dim(1);
  const double p = Kind == PoolKind::Lp ? lp_p(ctx) : 1.0;
  constexpr DTypeSet kSet = Kind == PoolKind::Max ? DTypeSet::Numeric : DTypeSet::Float;
  ctx.set_output(0, dispatch_dtype<kSet>(x.dtype(), ctx.node().op_type(), [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   ctx.check(size > 0, "spatial dims of X {} are empty", x.describe());
                   const T* px = x.data<T>();
                   Tensor y(x.dtype(), out_dims);
                   T* py = y.data<T>();
                   for (int64_t plane = 0; plane < planes; ++plane) {
                     const T* xp = px + plane * size;
                     if constexpr (Kind == PoolKind::Max) {
                       T best = xp[0];
                       for (int64_t i = 1; i < size; ++i)
                         if (static_cast<double>(xp[i]) > static_cast<double>(best)) best = xp[i];
                       py[plane] = best;
                     } else if constexpr (Kind == PoolKind::Average) {
                       double sum = 0;
                       for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(xp[i]);
                       py[plane] = static_cast<T>(sum / static_cast<double>(size));
                     } else {
                       double sum = 0;
                       for (int64_t i = 0; i < size; ++i)
                         sum += std::pow(std::fabs(static_cast<double>(xp[i])), p);
                       py[plane] = static_cast<T>(std::pow(sum, 1.0 / p));
                     }
                   }
                   return y;
                 }));
}

void infer_global_pool(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (x->shape) {
    ctx.check(x->shape->rank() >= 3, "X must have rank >= 3, got {}", x->shape->rank());
    std::vector<Dim> dims(x->shape->rank(), Dim(1));
    dims[0] = (*x->shape)[0];
    dims[1] = (*x->shape)[1];
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

// MaxUnpool's natural output size: the input of the MaxPool that produced the indices.
std::vector<int64_t> unpool_dims(const AttrReader& ctx, const std::vector<int64_t>& x_dims) {
  std::vector<int64_t> kernel = pool_kernel(ctx);
  const size_t nsp = x_dims.size() - 2;
  ctx.check(kernel.size() == nsp, "kernel_shape has {} dims but X has {} spatial dims",
            kernel.size(), nsp);
  std::vector<int64_t> strides = spatial_ints(ctx, "strides", nsp, 1, 1);
  std::vector<int64_t> pads = spatial_ints(ctx, "pads", 2 * nsp, 0, 0);
  std::vector<int64_t> dims = {x_dims[0], x_dims[1]};
  for (size_t d = 0; d < nsp; ++d) {
    int64_t v = x_dims[d + 2] < 0
                    ? -1
                    : (x_dims[d + 2] - 1) * strides[d] + kernel[d] - pads[d] - pads[nsp + d];
    ctx.check(x_dims[d + 2] < 0 || v >= 0, "negative output size {}", v);
    dims.push_back(v);
  }
  return dims;
}

void max_unpool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  ctx.check(x.rank() >= 3, "X must have rank >= 3, got {}", x.describe());
  ctx.check(ind.dtype() == DataType::Int64 && ind.dims() == x.dims(),
            "I must be int64 with the shape of X {}, got {}", x.describe(), ind.describe());
  std::vector<int64_t> natural = unpool_dims(ctx, x.dims());
  std::vector<int64_t> out_dims = natural;
  if (ctx.has_input(2)) {
    out_dims = ctx.input(2).to_int64_vector();
    ctx.check(out_dims.size() == x.rank(), "output_shape has {} dims, expected {}", out_dims.size(),
              x.rank());
    for (size_t d = 0; d < out_dims.size(); ++d)
      ctx.check(out_dims[d] >= natural[d], "output_shape {} is smaller than the unpooled shape {}",
                dims_to_string(out_dims), dims_to_string(natural));
  }
  // Indices address the natural (unpadded) unpooled tensor; a larger output_shape places it
  // at the origin.
  const int64_t natural_size = shape_numel(natural);
  std::vector<int64_t> nat_strides = row_major_strides(natural);
  std::vector<int64_t> out_strides = row_major_strides(out_dims);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "MaxUnpool", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor y(x.dtype(), out_dims);
                   T* py = y.data<T>();
                   const T* px = x.data<T>();
                   const int64_t* pi = ind.data<int64_t>();
                   for (int64_t i = 0; i < x.numel(); ++i) {
                     int64_t idx = pi[i];
                     ctx.check(idx >= 0 && idx < natural_size, "index {} is out of range [0, {})",
                               idx, natural_size);
                     int64_t off = 0;
                     for (size_t d = 0; d < natural.size(); ++d) {
                       off += (idx / nat_strides[d]) * out_strides[d];
                       idx %= nat_strides[d];
                     }
                     py[off] = px[i];
                   }
                   return y;
                 }));
}

void infer_max_unpool(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (ctx.has_input(2)) {
    if (const Tensor* s = ctx.input_constant(2)) shape = Shape::from_values(s->to_int64_vector());
  } else if (x->shape && ctx.has_attr("kernel_shape")) {
    ctx.check(x->shape->rank() >= 3, "X must have rank >= 3, got {}", x->shape->rank());
    std::vector<int64_t> xd = static_or_unknown(*x->shape, 0);
    std::vector<int64_t> d = unpool_dims(ctx, xd);
    std::vector<Dim> dims = {(*x->shape)[0], (*x->shape)[1]};
    for (size_t i = 2; i < d.size(); ++i) dims.push_back(d[i] >= 0 ? Dim(d[i]) : Dim());
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "MaxPool",
                  .kernel = pool<PoolKind::Max>,
                  .infer = infer_pool,
                  .traits = {
                      .fp16 = {.safe = true}, .quantization = true, .flops = flops_pool_window}});
KILN_REGISTER_OP({.op_type = "AveragePool",
                  .kernel = pool<PoolKind::Average>,
                  .infer = infer_pool,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_pool_window}});
KILN_REGISTER_OP({.op_type = "LpPool",
                  .kernel = pool<PoolKind::Lp>,
                  .infer = infer_pool,
                  .traits = {.flops = flops_pool_window}});
KILN_REGISTER_OP({.op_type = "GlobalMaxPool",
                  .kernel = global_pool<PoolKind::Max>,
                  .infer = infer_global_pool,
                  .traits = {
                      .fp16 = {.safe = true}, .quantization = true, .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "GlobalAveragePool",
                  .kernel = global_pool<PoolKind::Average>,
                  .infer = infer_global_pool,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "GlobalLpPool",
                  .kernel = global_pool<PoolKind::Lp>,
                  .infer = infer_global_pool,
                  .traits = {.flops = flops_per_input}});
KILN_REGISTER_OP({.op_type = "MaxUnpool", .kernel = max_unpool, .infer = infer_max_unpool});

}  // namespace
}  // namespace kiln::ops
