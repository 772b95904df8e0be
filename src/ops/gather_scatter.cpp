// Index-driven reads and writes: Gather, GatherElements, GatherND, ScatterElements, Scatter,
// ScatterND, TensorScatter.
#include <algorithm>
#include <cmath>

#include "ops/infer_utils.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

// Indices read as int64 with negative values wrapped; out-of-range ones fail.
std::vector<int64_t> checked_indices(const AttrReader& ctx, const Tensor& indices, int64_t dim) {
  std::vector<int64_t> v = index_values(ctx, indices, "indices");
  for (int64_t& i : v) {
    ctx.check(i >= -dim && i < dim, "index {} is out of range for a dimension of size {}", i, dim);
    if (i < 0) i += dim;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Gather

void gather_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int64_t r = static_cast<int64_t>(data.rank());
  ctx.check(r >= 1, "data must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), r));
  const size_t q = indices.rank();
  std::vector<int64_t> out_dims(data.dims().begin(), data.dims().begin() + axis);
  out_dims.insert(out_dims.end(), indices.dims().begin(), indices.dims().end());
  out_dims.insert(out_dims.end(), data.dims().begin() + axis + 1, data.dims().end());
  // An empty output reads nothing (numpy's take accepts any index then), so only check indices
  // that are actually used.
  if (checked_numel(ctx, out_dims) == 0) {
    ctx.set_output(0, Tensor(data.dtype(), out_dims));
    return;
  }
  std::vector<int64_t> idx = checked_indices(ctx, indices, data.dim(axis));
  std::vector<int64_t> dstrides = row_major_strides(data.dims());
  std::vector<int64_t> istrides = row_major_strides(indices.dims());
  ctx.set_output(0, remap(data, out_dims, [&](const std::vector<int64_t>& o) {
                   int64_t off = 0;
                   for (size_t i = 0; i < axis; ++i) off += o[i] * dstrides[i];
                   int64_t k = 0;
                   for (size_t i = 0; i < q; ++i) k += o[axis + i] * istrides[i];
                   off += idx[static_cast<size_t>(k)] * dstrides[axis];
                   for (size_t i = axis + 1; i < data.rank(); ++i)
                     off += o[i + q - 1] * dstrides[i];
                   return off;
                 }));
}

void infer_gather(InferContext& ctx) {
  const TypeInfo* d = tensor_input(ctx, 0);
  const TypeInfo* i = tensor_input(ctx, 1);
  if (!d) return;
  std::optional<Shape> out;
  if (d->shape && i && i->shape && d->shape->rank() >= 1) {
    const size_t axis = static_cast<size_t>(
        normalize_axis(ctx, ctx.attr_int("axis", 0), static_cast<int64_t>(d->shape->rank())));
    std::vector<Dim> dims(d->shape->dims().begin(), d->shape->dims().begin() + axis);
    dims.insert(dims.end(), i->shape->dims().begin(), i->shape->dims().end());
    dims.insert(dims.end(), d->shape->dims().begin() + axis + 1, d->shape->dims().end());
    out = Shape(std::move(dims));
  }
  ctx.set_output_type(0, TypeInfo::tensor(d->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// GatherElements

// Checks an element-wise index tensor against data: same rank, no larger off the axis.
void check_elementwise_indices(const AttrReader& ctx, const Tensor& data, const Tensor& indices,
                               size_t axis) {
  ctx.check(indices.rank() == data.rank(), "indices have rank {}, data has {}", indices.rank(),
            data.rank());
  for (size_t i = 0; i < data.rank(); ++i) {
    ctx.check(i == axis || indices.dim(i) <= data.dim(i),
              "indices shape {} exceeds data shape {} on axis {}", dims_to_string(indices.dims()),
              dims_to_string(data.dims()), i);
  }
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int64_t r = static_cast<int64_t>(data.rank());
  ctx.check(r >= 1, "data must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), r));
  check_elementwise_indices(ctx, data, indices, axis);
  std::vector<int64_t> idx = checked_indices(ctx, indices, data.dim(axis));
  std::vector<int64_t> dstrides = row_major_strides(data.dims());
  std::vector<int64_t> istrides = row_major_strides(indices.dims());
  ctx.set_output(0, remap(data, indices.dims(), [&](const std::vector<int64_t>& o) {
                   int64_t off = 0;
                   for (size_t i = 0; i < o.size(); ++i) {
                     off +=
                         (i == axis ? idx[static_cast<size_t>(flat_offset(o, istrides))] : o[i]) *
                         dstrides[i];
                   }
                   return off;
                 }));
}

void infer_gather_elements(InferContext& ctx) {
  const TypeInfo* d = tensor_input(ctx, 0);
  const TypeInfo* i = tensor_input(ctx, 1);
  if (!d) return;
  ctx.set_output_type(0, TypeInfo::tensor(d->dtype, i ? i->shape : std::nullopt));
}

// ---------------------------------------------------------------------------------------------
// GatherND

struct NdLayout {
  size_t batch = 0;  // leading batch dims shared by data and indices
  size_t depth = 0;  // length of each index tuple
  int64_t tuples = 0;
};

NdLayout nd_layout(const AttrReader& ctx, const Tensor& data, const Tensor& indices,
                   int64_t batch_dims) {
  ctx.check(data.rank() >= 1 && indices.rank() >= 1, "data and indices must have rank >= 1");
  ctx.check(
      batch_dims >= 0 && batch_dims < static_cast<int64_t>(std::min(data.rank(), indices.rank())),
      "batch_dims {} is out of range", batch_dims);
  NdLayout l;
  l.batch = static_cast<size_t>(batch_dims);
  for (size_t i = 0; i < l.batch; ++i) {
    ctx.check(data.dim(i) == indices.dim(i), "batch dim {} differs: data {} vs indices {}", i,
              dims_to_string(data.dims()), dims_to_string(indices.dims()));
  }
  int64_t last = indices.dims().back();
  ctx.check(last >= 1 && last <= static_cast<int64_t>(data.rank() - l.batch),
            "index tuples of length {} do not fit data of rank {} with {} batch dims", last,
            data.rank(), l.batch);
  l.depth = static_cast<size_t>(last);
  l.tuples = indices.numel() / last;
  return l;
}

// Index tuples with negative entries wrapped; entry j indexes data axis batch + j.
std::vector<int64_t> nd_indices(const AttrReader& ctx, const Tensor& data, const Tensor& indices,
                                const NdLayout& l) {
  std::vector<int64_t> v = index_values(ctx, indices, "indices");
  for (size_t k = 0; k < v.size(); ++k) {
    int64_t dim = data.dim(l.batch + k % l.depth);
    ctx.check(v[k] >= -dim && v[k] < dim, "index {} is out of range for a dimension of size {}",
              v[k], dim);
    if (v[k] < 0) v[k] += dim;
  }
  return v;
}

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  NdLayout l = nd_layout(ctx, data, indices, ctx.attr_int("batch_dims", 0));
  std::vector<int64_t> idx = nd_indices(ctx, data, indices, l);
  const size_t q1 = indices.rank() - 1;
  std::vector<int64_t> out_dims(indices.dims().begin(), indices.dims().end() - 1);
  out_dims.insert(out_dims.end(), data.dims().begin() + l.batch + l.depth, data.dims().end());
  std::vector<int64_t> dstrides = row_major_strides(data.dims());
  std::vector<int64_t> tstrides =
      row_major_strides(std::vector<int64_t>(indices.dims().begin(), indices.dims().end() - 1));
  ctx.set_output(0, remap(data, out_dims, [&](const std::vector<int64_t>& o) {
                   int64_t tuple = 0;
                   for (size_t i = 0; i < q1; ++i) tuple += o[i] * tstrides[i];
                   int64_t off = 0;
                   for (size_t i = 0; i < l.batch; ++i) off += o[i] * dstrides[i];
                   for (size_t j = 0; j < l.depth; ++j) {
                     off += idx[static_cast<size_t>(tuple) * l.depth + j] * dstrides[l.batch + j];
                   }
                   for (size_t i = q1; i < o.size(); ++i) {
                     off += o[i] * dstrides[l.batch + l.depth + (i - q1)];
                   }
                   return off;
                 }));
}

void infer_gather_nd(InferContext& ctx) {
  const TypeInfo* d = tensor_input(ctx, 0);
  const TypeInfo* i = tensor_input(ctx, 1);
  if (!d) return;
  std::optional<Shape> out;
  if (d->shape && i && i->shape && i->shape->rank() >= 1 && i->shape->dims().back().is_static()) {
    int64_t batch_dims = ctx.attr_int("batch_dims", 0);
    ctx.check(batch_dims >= 0, "batch_dims {} is negative", batch_dims);
    size_t batch = static_cast<size_t>(batch_dims);
    size_t last = static_cast<size_t>(i->shape->dims().back().value());
    if (batch <= d->shape->rank() && last <= d->shape->rank() - batch) {
      std::vector<Dim> dims(i->shape->dims().begin(), i->shape->dims().end() - 1);
      dims.insert(dims.end(), d->shape->dims().begin() + batch + last, d->shape->dims().end());
      out = Shape(std::move(dims));
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(d->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// Scatter family

enum class Reduction { None, Add, Mul, Max, Min };

Reduction scatter_reduction(const AttrReader& ctx) {
  std::string r = ctx.attr_string("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  ctx.fail("unknown reduction '{}'", r);
}

template <typename T>
T reduce_pair(Reduction r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    // numpy semantics on bool: add/max are OR, mul/min are AND.
    return (r == Reduction::Add || r == Reduction::Max) ? (a || b) : (a && b);
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap on overflow without UB
    switch (r) {
      case Reduction::Add:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case Reduction::Mul:
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Reduction::Max:
        return std::max(a, b);
      case Reduction::Min:
        return std::min(a, b);
      default:
        return b;
    }
  } else {
    // Floats compute in double (exact for float and half operands before the final rounding);
    // max/min propagate NaN like numpy's maximum/minimum.
    double x = static_cast<double>(a), y = static_cast<double>(b), z = y;
    if constexpr (!std::is_same_v<T, double>) {
      x = static_cast<double>(static_cast<float>(a));
      y = static_cast<double>(static_cast<float>(b));
    }
    switch (r) {
      case Reduction::Add:
        z = x + y;
        break;
      case Reduction::Mul:
        z = x * y;
        break;
      case Reduction::Max:
        z = (std::isnan(x) || std::isnan(y)) ? std::nan("") : std::max(x, y);
        break;
      case Reduction::Min:
        z = (std::isnan(x) || std::isnan(y)) ? std::nan("") : std::min(x, y);
        break;
      default:
        break;
    }
    if constexpr (std::is_same_v<T, double>) {
      return z;
    } else {
      return T(static_cast<float>(z));
    }
  }
}

// out = data; out[map(u)] (op)= updates[u] for every update element in order.
template <typename MapFn>
Tensor scatter_with(const KernelContext& ctx, const Tensor& data, const Tensor& updates,
                    Reduction reduction, MapFn&& map) {
  ctx.check(updates.dtype() == data.dtype(), "updates have type {}, data has {}",
            dtype_name(updates.dtype()), dtype_name(data.dtype()));
  Tensor out = data.clone();
  if (reduction == Reduction::None) {
    scatter_into(out, updates, map);
    return out;
  }
  dispatch_dtype<DTypeSet::NumericBool>(data.dtype(), ctx.node().op_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* po = out.data<T>();
    const T* pu = updates.data<T>();
    std::vector<int64_t> index(updates.rank(), 0);
    for (int64_t i = 0; i < updates.numel(); ++i) {
      int64_t d = map(static_cast<const std::vector<int64_t>&>(index));
      po[d] = reduce_pair<T>(reduction, po[d], pu[i]);
      detail::next_index(index, updates.dims());
    }
  });
  return out;
}

void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  const int64_t r = static_cast<int64_t>(data.rank());
  ctx.check(r >= 1, "data must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), r));
  check_elementwise_indices(ctx, data, indices, axis);
  ctx.check(updates.dims() == indices.dims(), "updates shape {} differs from indices shape {}",
            dims_to_string(updates.dims()), dims_to_string(indices.dims()));
  std::vector<int64_t> idx = checked_indices(ctx, indices, data.dim(axis));
  std::vector<int64_t> dstrides = row_major_strides(data.dims());
  std::vector<int64_t> istrides = row_major_strides(indices.dims());
  Reduction red = ctx.node().op_type() == "Scatter" ? Reduction::None : scatter_reduction(ctx);
  ctx.set_output(0, scatter_with(ctx, data, updates, red, [&](const std::vector<int64_t>& u) {
                   int64_t off = 0;
                   for (size_t i = 0; i < u.size(); ++i) {
                     off +=
                         (i == axis ? idx[static_cast<size_t>(flat_offset(u, istrides))] : u[i]) *
                         dstrides[i];
                   }
                   return off;
                 }));
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  NdLayout l = nd_layout(ctx, data, indices, 0);
  std::vector<int64_t> idx = nd_indices(ctx, data, indices, l);
  const size_t q1 = indices.rank() - 1;
  std::vector<int64_t> want(indices.dims().begin(), indices.dims().end() - 1);
  want.insert(want.end(), data.dims().begin() + l.depth, data.dims().end());
  ctx.check(updates.dims() == want, "updates shape {} should be {}", dims_to_string(updates.dims()),
            dims_to_string(want));
  std::vector<int64_t> dstrides = row_major_strides(data.dims());
  std::vector<int64_t> tstrides =
      row_major_strides(std::vector<int64_t>(indices.dims().begin(), indices.dims().end() - 1));
  ctx.set_output(
      0,
      scatter_with(ctx, data, updates, scatter_reduction(ctx), [&](const std::vector<int64_t>& u) {
        int64_t tuple = 0;
        for (size_t i = 0; i < q1; ++i) tuple += u[i] * tstrides[i];
        int64_t off = 0;
        for (size_t j = 0; j < l.depth; ++j) {
          off += idx[static_cast<size_t>(tuple) * l.depth + j] * dstrides[j];
        }
        for (size_t i = q1; i < u.size(); ++i) {
          off += u[i] * dstrides[l.depth + (i - q1)];
        }
        return off;
      }));
}

// ---------------------------------------------------------------------------------------------
// TensorScatter: writes `update` into a KV cache at per-batch sequence offsets.

void tensor_scatter_kernel(KernelContext& ctx) {
  const Tensor& cache = ctx.input(0);
  const Tensor& update = ctx.input(1);
  const int64_t r = static_cast<int64_t>(cache.rank());
  ctx.check(r >= 2, "past_cache must have rank >= 2");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -2), r));
  ctx.check(axis >= 1, "axis cannot be the batch axis");
  std::string mode = ctx.attr_string("mode", "linear");
  ctx.check(mode == "linear" || mode == "circular", "unknown mode '{}'", mode);
  ctx.check(update.rank() == cache.rank(), "update has rank {}, past_cache has {}", update.rank(),
            cache.rank());
  for (size_t i = 0; i < cache.rank(); ++i) {
    ctx.check(i == axis ? update.dim(i) <= cache.dim(i) : update.dim(i) == cache.dim(i),
              "update shape {} does not fit past_cache shape {}", dims_to_string(update.dims()),
              dims_to_string(cache.dims()));
  }
  const int64_t batch = cache.dim(0);
  const int64_t max_seq = cache.dim(axis);
  std::vector<int64_t> write(static_cast<size_t>(batch), 0);
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    ctx.check(w.rank() == 1 && w.dim(0) == batch, "write_indices must have shape [{}], got {}",
              batch, w.describe());
    write = index_values(ctx, w, "write_indices");
  }
  const bool circular = mode == "circular";
  for (int64_t w : write) {
    ctx.check(w >= 0, "negative write index {}", w);
    ctx.check(circular || w <= max_seq - update.dim(axis),
              "write index {} plus {} updates exceeds the cache length {}", w, update.dim(axis),
              max_seq);
  }
  std::vector<int64_t> strides = row_major_strides(cache.dims());
  Tensor out = cache.clone();
  scatter_into(out, update, [&](const std::vector<int64_t>& u) {
    int64_t w = write[static_cast<size_t>(u[0])];
    int64_t pos = circular ? (w % max_seq + u[axis]) % max_seq : w + u[axis];
    int64_t off = 0;
    for (size_t i = 0; i < u.size(); ++i) off += (i == axis ? pos : u[i]) * strides[i];
    return off;
  });
  ctx.set_output(0, std::move(out));
}

KILN_REGISTER_OP({.op_type = "Gather",
                  .kernel = gather_kernel,
                  .infer = lenient<infer_gather>,
                  .traits = {.fp16 = {.safe = true}, .quantization = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "GatherElements",
                  .kernel = gather_elements_kernel,
                  .infer = lenient<infer_gather_elements>,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "GatherND",
                  .kernel = gather_nd_kernel,
                  .infer = lenient<infer_gather_nd>,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "ScatterElements",
                  .kernel = scatter_elements_kernel,
                  .infer = infer_same_as_input0,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Scatter",
                  .kernel = scatter_elements_kernel,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "ScatterND",
                  .kernel = scatter_nd_kernel,
                  .infer = infer_same_as_input0,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "TensorScatter",
                  .kernel = tensor_scatter_kernel,
                  .infer = infer_same_as_input0});

}  // namespace
}  // namespace kiln::ops
