// Ops that cut, join or border tensors along axes: Concat, Split, Slice, Pad, CenterCropPad.
#include <algorithm>
#include <limits>

#include "ops/infer_utils.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/pad_rules.hpp"
#include "ops/registry.hpp"
#include "ops/shape_values.hpp"
#include "ops/slice_axis.hpp"
#include "ops/split_sizes.hpp"

namespace kiln::ops {
namespace {

// ---------------------------------------------------------------------------------------------
// Concat

int64_t concat_axis_attr(const AttrReader& ctx) {
  // Opset 1 made axis optional with default 1; from opset 4 it is required.
  return ctx.opset() < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis");
}

void concat_kernel(KernelContext& ctx) {
  ctx.check(ctx.input_count() >= 1, "needs at least one input");
  const Tensor& first = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(first.rank());
  ctx.check(rank >= 1, "inputs must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, concat_axis_attr(ctx), rank));
  std::vector<int64_t> out_dims = first.dims();
  out_dims[axis] = 0;
  for (size_t k = 0; k < ctx.input_count(); ++k) {
    const Tensor& t = ctx.input(k);
    ctx.check(t.dtype() == first.dtype(), "input {} has type {}, input 0 has {}", k,
              dtype_name(t.dtype()), dtype_name(first.dtype()));
    ctx.check(t.rank() == first.rank(), "input {} has rank {}, input 0 has {}", k, t.rank(),
              first.rank());
    for (size_t i = 0; i < t.rank(); ++i) {
      ctx.check(i == axis || t.dim(i) == first.dim(i), "input {} has shape {}, input 0 has {}", k,
                dims_to_string(t.dims()), dims_to_string(first.dims()));
    }
    auto sum = add_dims(out_dims[axis], t.dim(axis));
    ctx.check(sum.has_value(), "concatenated dimension overflows");
    out_dims[axis] = *sum;
  }
  Tensor out(first.dtype(), out_dims);
  std::vector<int64_t> out_strides = row_major_strides(out_dims);
  int64_t offset = 0;
  for (size_t k = 0; k < ctx.input_count(); ++k) {
    const Tensor& t = ctx.input(k);
    scatter_into(out, t, [&](const std::vector<int64_t>& idx) {
      return flat_offset(idx, out_strides) + offset * out_strides[axis];
    });
    offset += t.dim(axis);
  }
  ctx.set_output(0, std::move(out));
}

void infer_concat(InferContext& ctx) {
  const TypeInfo* first = tensor_input(ctx, 0);
  if (!first) return;
  std::optional<Shape> out;
  for (size_t k = 0; k < ctx.input_count(); ++k) {
    const TypeInfo* t = tensor_input(ctx, k);
    if (t && t->shape) {
      out = *t->shape;
      break;
    }
  }
  if (out) {
    ctx.check(out->rank() >= 1, "inputs must have rank >= 1");
    const size_t axis = static_cast<size_t>(
        normalize_axis(ctx, concat_axis_attr(ctx), static_cast<int64_t>(out->rank())));
    int64_t sum = 0;
    bool known = true;
    for (size_t k = 0; k < ctx.input_count(); ++k) {
      const TypeInfo* t = tensor_input(ctx, k);
      if (!t || !t->shape) {
        known = false;
        continue;
      }
      ctx.check(t->shape->rank() == out->rank(), "input {} has rank {}, expected {}", k,
                t->shape->rank(), out->rank());
      for (size_t i = 0; i < out->rank(); ++i) {
        const Dim& d = (*t->shape)[i];
        if (i == axis) {
          auto next = d.is_static() ? add_dims(sum, d.value()) : std::nullopt;
          if (next) {
            sum = *next;
          } else {
            known = false;
          }
        } else if (!(*out)[i].is_static() && d.is_static()) {
          (*out)[i] = d;  // a static dim elsewhere pins this one
        }
      }
    }
    (*out)[axis] = known ? Dim(sum) : Dim();
  }
  ctx.set_output_type(0, TypeInfo::tensor(first->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// Split

// Sizes given by the model: attribute before opset 13 (or input in opset 1), input after.
std::optional<std::vector<int64_t>> split_sizes_given(const KernelContext& ctx) {
  if (ctx.opset() < 13 && ctx.has_attr("split")) return ctx.attr_ints("split");
  if ((ctx.opset() >= 13 || ctx.opset() < 2) && ctx.has_input(1)) {
    return index_values(ctx, ctx.input(1), "split");
  }
  return std::nullopt;
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), rank));
  const int64_t dim = x.dim(axis);
  std::vector<int64_t> sizes;
  if (auto given = split_sizes_given(ctx)) {
    sizes = *given;
    check_split_sizes(ctx, sizes, ctx.output_count(), axis, dim);
  } else {
    sizes = split_equal(ctx, dim, split_part_count(ctx, ctx.output_count()));
  }
  std::vector<int64_t> strides = row_major_strides(x.dims());
  int64_t offset = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<int64_t> out_dims = x.dims();
    out_dims[axis] = sizes[k];
    if (ctx.wants_output(k)) {
      ctx.set_output(k, remap(x, out_dims, [&](const std::vector<int64_t>& idx) {
                       return flat_offset(idx, strides) + offset * strides[axis];
                     }));
    }
    offset += sizes[k];
  }
}

void infer_split(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  const size_t n = ctx.output_count();
  std::vector<std::optional<Shape>> shapes(n);
  if (t->shape && t->shape->rank() >= 1) {
    const size_t axis = static_cast<size_t>(
        normalize_axis(ctx, ctx.attr_int("axis", 0), static_cast<int64_t>(t->shape->rank())));
    std::optional<std::vector<int64_t>> sizes;
    if (ctx.opset() < 13 && ctx.has_attr("split")) {
      sizes = ctx.attr_ints("split");
    } else if (ctx.opset() >= 13 || ctx.opset() < 2) {
      sizes = constant_ints(ctx, 1);
    }
    const Dim& d = (*t->shape)[axis];
    bool given = ctx.has_input(1) && (ctx.opset() >= 13 || ctx.opset() < 2);
    if (!sizes && !given && !(ctx.opset() < 13 && ctx.has_attr("split")) && d.is_static()) {
      sizes = split_equal(ctx, d.value(), split_part_count(ctx, n));
    }
    for (size_t k = 0; k < n; ++k) {
      shapes[k] = *t->shape;
      (*shapes[k])[axis] = sizes && sizes->size() == n ? Dim((*sizes)[k]) : Dim();
    }
  }
  for (size_t k = 0; k < n; ++k) ctx.set_output_type(k, TypeInfo::tensor(t->dtype, shapes[k]));
}

// ---------------------------------------------------------------------------------------------
// Slice

struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

SliceArgs slice_args(const KernelContext& ctx, int64_t rank) {
  SliceArgs a;
  if (ctx.opset() < 10) {
    a.starts = ctx.attr_ints("starts");
    a.ends = ctx.attr_ints("ends");
    a.axes = ctx.attr_ints("axes", {});
  } else {
    a.starts = index_values(ctx, ctx.input(1), "starts");
    a.ends = index_values(ctx, ctx.input(2), "ends");
    if (ctx.has_input(3)) a.axes = index_values(ctx, ctx.input(3), "axes");
    if (ctx.has_input(4)) a.steps = index_values(ctx, ctx.input(4), "steps");
  }
  ctx.check(a.starts.size() == a.ends.size(), "starts has {} entries but ends has {}",
            a.starts.size(), a.ends.size());
  if (a.axes.empty() && !(ctx.opset() >= 10 && ctx.has_input(3))) {
    for (size_t i = 0; i < a.starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
  }
  ctx.check(a.axes.size() == a.starts.size(), "axes has {} entries but starts has {}",
            a.axes.size(), a.starts.size());
  if (a.steps.empty() && !(ctx.opset() >= 10 && ctx.has_input(4))) {
    a.steps.assign(a.starts.size(), 1);
  }
  ctx.check(a.steps.size() == a.starts.size(), "steps has {} entries but starts has {}",
            a.steps.size(), a.starts.size());
  a.axes = normalize_axes(ctx, a.axes, rank);
  for (int64_t s : a.steps) ctx.check(s != 0, "slice step cannot be 0");
  return a;
}

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  SliceArgs a = slice_args(ctx, static_cast<int64_t>(x.rank()));
  std::vector<SliceAxis> per_axis(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) per_axis[i] = {0, 1, x.dim(i)};
  for (size_t k = 0; k < a.axes.size(); ++k) {
    size_t ax = static_cast<size_t>(a.axes[k]);
    per_axis[ax] = resolve_slice(x.dim(ax), a.starts[k], a.ends[k], a.steps[k]);
  }
  std::vector<int64_t> out_dims(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) out_dims[i] = per_axis[i].length;
  std::vector<int64_t> strides = row_major_strides(x.dims());
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& idx) {
                   int64_t off = 0;
                   for (size_t i = 0; i < idx.size(); ++i) {
                     off += (per_axis[i].start + idx[i] * per_axis[i].step) * strides[i];
                   }
                   return off;
                 }));
}

void infer_slice(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  if (!t->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype));
    return;
  }
  const int64_t rank = static_cast<int64_t>(t->shape->rank());
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  // Ends computed from a symbolic dim (x[:, :seq] exports as Slice(x, 0, Shape(ids)[1])).
  std::optional<SymValues> sym_ends;
  if (ctx.opset() < 10) {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    axes = ctx.attr_ints("axes", {});
    steps.emplace();  // opset 1 has no steps: all 1
  } else {
    starts = constant_ints(ctx, 1);
    ends = constant_ints(ctx, 2);
    axes = ctx.has_input(3) ? constant_ints(ctx, 3) : std::vector<int64_t>{};
    steps = ctx.has_input(4) ? constant_ints(ctx, 4) : std::vector<int64_t>{};
    if (!ends && (sym_ends = input_sym_values(ctx, 2))) {
      ends.emplace();
      for (const SymValue& v : *sym_ends) ends->push_back(v.number.value_or(0));
    }
  }
  Shape out = *t->shape;
  if (axes && axes->empty()) {
    std::optional<int64_t> n;
    if (starts) n = static_cast<int64_t>(starts->size());
    if (!n && ctx.opset() >= 10) n = static_length(ctx, 1);
    if (!n) {
      ctx.set_output_type(0, TypeInfo::tensor(t->dtype, unknown_dims(out.rank())));
      return;
    }
    for (int64_t i = 0; i < *n; ++i) axes->push_back(i);
  }
  if (!axes) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype, unknown_dims(out.rank())));
    return;
  }
  std::vector<int64_t> norm = normalize_axes(ctx, *axes, rank);
  bool values_known = starts && ends && steps && starts->size() == norm.size() &&
                      ends->size() == norm.size() &&
                      (steps->empty() || steps->size() == norm.size());
  for (size_t k = 0; k < norm.size(); ++k) {
    Dim& d = out[static_cast<size_t>(norm[k])];
    if (!values_known) {
      d = Dim();
      continue;
    }
    int64_t step = steps->empty() ? 1 : (*steps)[k];
    ctx.check(step != 0, "slice step cannot be 0");
    int64_t s = (*starts)[k], e = (*ends)[k];
    if (sym_ends && !(*sym_ends)[k].number) {
      // [0, e) with step 1 is e itself when the axis is at least e long: the same symbol, or
      // a static length no smaller than e's declared maximum. Otherwise min(e, length) is not
      // known statically.
      const Dim end_dim = (*sym_ends)[k].dim;
      bool prefix = step == 1 && s == 0 && end_dim.is_symbolic() &&
                    (d == end_dim || (d.is_static() && end_dim.max() <= d.value()));
      if (prefix) {
        d = end_dim;
      } else if (step == 1 && s == 0 && end_dim.is_symbolic() && d.is_static()) {
        d = clamped_symbol(end_dim, d.value());  // min(e, length), a symbol bounded by length
      } else {
        d = Dim();
      }
      continue;
    }
    if (d.is_static()) {
      d = Dim(resolve_slice(d.value(), s, e, step).length);
    } else if (!(step == 1 && s == 0 && e >= std::numeric_limits<int32_t>::max())) {
      d = Dim();  // a full slice keeps a symbolic dim; anything else is unknown
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// Pad

// The constant fill as a scalar tensor of the data's type.
Tensor pad_fill(const KernelContext& ctx, const Tensor& x) {
  if (ctx.opset() >= 11) {
    if (!ctx.has_input(2)) return Tensor();
    const Tensor& v = ctx.input(2);
    ctx.check(v.dtype() == x.dtype(), "constant_value has type {}, data has {}",
              dtype_name(v.dtype()), dtype_name(x.dtype()));
    ctx.check(v.numel() <= 1, "constant_value must be a scalar, got {}", v.describe());
    return v;
  }
  float value = ctx.attr_float("value", 0.0f);
  if (x.dtype() == DataType::String) return Tensor();
  return dispatch_dtype<DTypeSet::NumericBool>(x.dtype(), "Pad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor::scalar<T>(convert_element<T>(value));
  });
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> pads, axes;
  if (ctx.opset() < 11) {
    pads = ctx.attr_ints(ctx.opset() < 2 ? "paddings" : "pads");
    axes = all_axes(rank);
  } else {
    const Tensor& p = ctx.input(1);
    ctx.check(p.rank() <= 1, "pads must be 1-D, got {}", p.describe());
    pads = index_values(ctx, p, "pads");
    axes = ctx.has_input(3) ? index_values(ctx, ctx.input(3), "axes") : all_axes(rank);
  }
  const PadMode mode = pad_mode(ctx);
  Tensor fill = pad_fill(ctx, x);
  const PadPlan plan = plan_pad(ctx, x.dims(), expand_pads(ctx, pads, axes, rank), mode, pads);
  const std::vector<int64_t>&lo = plan.lo, &len = plan.len, &before = plan.before,
        &out_dims = plan.out_dims;
  checked_numel(ctx, out_dims);
  std::vector<int64_t> strides = row_major_strides(x.dims());
  ctx.set_output(0, remap(
                        x, out_dims,
                        [&](const std::vector<int64_t>& idx) {
                          int64_t off = 0;
                          for (size_t i = 0; i < idx.size(); ++i) {
                            int64_t s = pad_source(mode, idx[i] - before[i], len[i]);
                            if (s < 0) return int64_t{-1};
                            off += (lo[i] + s) * strides[i];
                          }
                          return off;
                        },
                        fill.defined() ? &fill : nullptr));
}

void infer_pad(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  if (!t->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype));
    return;
  }
  const int64_t rank = static_cast<int64_t>(t->shape->rank());
  std::optional<std::vector<int64_t>> pads, axes;
  if (ctx.opset() < 11) {
    pads = ctx.attr_ints(ctx.opset() < 2 ? "paddings" : "pads");
    axes = all_axes(rank);
  } else {
    pads = constant_ints(ctx, 1);
    axes = ctx.has_input(3) ? constant_ints(ctx, 3) : all_axes(rank);
  }
  Shape out = *t->shape;
  if (!pads || !axes) {
    if (axes) {  // only the padded axes change
      for (int64_t a : normalize_axes(ctx, *axes, rank)) out[static_cast<size_t>(a)] = Dim();
    } else {
      out = unknown_dims(out.rank());
    }
  } else {
    std::vector<int64_t> full = expand_pads(ctx, *pads, *axes, rank);
    for (size_t i = 0; i < out.rank(); ++i) {
      if (full[i] == 0 && full[i + out.rank()] == 0) continue;
      std::optional<int64_t> v;
      if (out[i].is_static()) v = add_dims(out[i].value(), full[i]);
      if (v) v = add_dims(*v, full[i + out.rank()]);
      out[i] = v && *v >= 0 ? Dim(*v) : Dim();
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// CenterCropPad

void center_crop_pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> shape = index_values(ctx, ctx.input(1), "shape");
  std::vector<int64_t> axes = normalize_axes(ctx, ctx.attr_ints("axes", all_axes(rank)), rank);
  ctx.check(shape.size() == axes.size(), "shape has {} entries for {} axes", shape.size(),
            axes.size());
  std::vector<int64_t> out_dims = x.dims(), offset(x.rank(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    size_t ax = static_cast<size_t>(axes[k]);
    ctx.check(shape[k] >= 0, "negative target size {}", shape[k]);
    int64_t d = x.dim(ax);
    out_dims[ax] = shape[k];
    // Crop windows start rounded down; odd padding puts the extra element at the end.
    offset[ax] = d >= shape[k] ? (d - shape[k]) / 2 : -((shape[k] - d) / 2);
  }
  checked_numel(ctx, out_dims);
  std::vector<int64_t> strides = row_major_strides(x.dims());
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& idx) {
                   int64_t off = 0;
                   for (size_t i = 0; i < idx.size(); ++i) {
                     int64_t s = idx[i] + offset[i];
                     if (s < 0 || s >= x.dim(i)) return int64_t{-1};
                     off += s * strides[i];
                   }
                   return off;
                 }));
}

void infer_center_crop_pad(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  if (!t->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype));
    return;
  }
  const int64_t rank = static_cast<int64_t>(t->shape->rank());
  std::vector<int64_t> axes = normalize_axes(ctx, ctx.attr_ints("axes", all_axes(rank)), rank);
  Shape out = *t->shape;
  auto shape = constant_ints(ctx, 1);
  for (size_t k = 0; k < axes.size(); ++k) {
    out[static_cast<size_t>(axes[k])] =
        shape && shape->size() == axes.size() ? Dim((*shape)[k]) : Dim();
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

KILN_REGISTER_OP({.op_type = "Concat",
                  .kernel = concat_kernel,
                  .infer = lenient<infer_concat>,
                  .traits = {.fp16 = {.safe = true}, .quantization = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Split",
                  .kernel = split_kernel,
                  .infer = lenient<infer_split>,
                  .traits = {.shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Slice",
                  .kernel = slice_kernel,
                  .infer = lenient<infer_slice>,
                  .traits = {.shape_inputs = slots({1, 2, 3, 4}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Pad",
                  .kernel = pad_kernel,
                  .infer = lenient<infer_pad>,
                  .traits = {
                      .shape_inputs = slots({1, 3}), .fp16 = {.safe = true}, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "CenterCropPad",
                  .kernel = center_crop_pad_kernel,
                  .infer = lenient<infer_center_crop_pad>,
                  .traits = {.shape_inputs = slots({1})}});

}  // namespace
}  // namespace kiln::ops
