// Shape-only and layout ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
// Expand, Tile, ConstantOfShape.
#include <algorithm>
#include <map>

#include "ops/infer_utils.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/shape_values.hpp"

namespace kiln::ops {
namespace {

// ---------------------------------------------------------------------------------------------
// Shape / Size

// Clamped [start, end) of Shape's start/end attributes (opset 15+) for a given rank.
std::pair<int64_t, int64_t> shape_range(const AttrReader& ctx, int64_t rank) {
  int64_t start = ctx.attr_int("start", 0);
  int64_t end = ctx.has_attr("end") ? ctx.attr_int("end") : rank;
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  start = clamp(start);
  end = clamp(end);
  return {start, std::max(start, end)};
}

void shape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto [start, end] = shape_range(ctx, static_cast<int64_t>(x.rank()));
  std::vector<int64_t> dims(x.dims().begin() + start, x.dims().begin() + end);
  ctx.set_output(0, Tensor::from_vector<int64_t>({end - start}, dims));
}

void infer_shape(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  std::optional<Shape> out;
  if (t && t->shape) {
    auto [start, end] = shape_range(ctx, static_cast<int64_t>(t->shape->rank()));
    out = Shape({Dim(end - start)});
  } else {
    out = unknown_dims(1);
  }
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Int64, out));
}

void size_kernel(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<int64_t>(ctx.input(0).numel()));
}

void infer_size(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Int64, Shape()));
}

// ---------------------------------------------------------------------------------------------
// Reshape

std::vector<int64_t> reshape_target(const KernelContext& ctx) {
  if (ctx.opset() < 5) return ctx.attr_ints("shape");
  const Tensor& s = ctx.input(1);
  ctx.check(s.rank() == 1, "shape input must be 1-D, got {}", s.describe());
  return index_values(ctx, s, "shape");
}

std::vector<int64_t> resolve_reshape(const AttrReader& ctx, const std::vector<int64_t>& in_dims,
                                     std::vector<int64_t> shape, bool allowzero) {
  int64_t numel = checked_numel(ctx, in_dims);
  int64_t infer_at = -1;
  bool has_zero = false;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t& d = shape[i];
    if (d == -1) {
      ctx.check(infer_at < 0, "shape {} has more than one -1", dims_to_string(shape));
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    ctx.check(d >= 0, "invalid dimension {} in shape {}", d, dims_to_string(shape));
    if (d == 0) {
      has_zero = true;
      if (!allowzero) {
        ctx.check(i < in_dims.size(), "shape {} copies dimension {} but the input has rank {}",
                  dims_to_string(shape), i, in_dims.size());
        d = in_dims[i];
      }
    }
    if (d != 0 && known > std::numeric_limits<int64_t>::max() / d) {
      ctx.fail("shape {} overflows", dims_to_string(shape));
    }
    known *= d;
  }
  if (infer_at >= 0) {
    ctx.check(!(allowzero && has_zero), "shape {} has both 0 and -1 with allowzero=1",
              dims_to_string(shape));
    ctx.check(known != 0 && numel % known == 0, "cannot reshape {} elements into {}", numel,
              dims_to_string(shape));
    shape[static_cast<size_t>(infer_at)] = numel / known;
  } else {
    ctx.check(known == numel, "cannot reshape {} into {}", dims_to_string(in_dims),
              dims_to_string(shape));
  }
  return shape;
}

void reshape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool allowzero = ctx.attr_int("allowzero", 0) != 0;
  ctx.set_output(0, x.reshaped(resolve_reshape(ctx, x.dims(), reshape_target(ctx), allowzero)));
}

// The -1 dim of a reshape computed symbolically: input and output symbols cancel, statics divide.
Dim infer_minus_one(const Shape& in, const std::vector<Dim>& out) {
  std::map<std::string, int> symbols;
  int64_t in_static = 1;
  for (const Dim& d : in.dims()) {
    if (d.is_static()) {
      auto p = mul_dims(in_static, d.value());
      if (!p) return Dim();
      in_static = *p;
    } else if (d.is_symbolic()) {
      ++symbols[d.symbol_name()];
    } else {
      return Dim();
    }
  }
  int64_t out_static = 1;
  for (const Dim& d : out) {
    if (d.is_static()) {
      auto p = mul_dims(out_static, d.value());
      if (!p) return Dim();
      out_static = *p;
    } else if (d.is_symbolic() && symbols[d.symbol_name()] > 0) {
      --symbols[d.symbol_name()];
    } else {
      return Dim();
    }
  }
  for (const auto& [name, count] : symbols) {
    if (count != 0) return Dim();
  }
  if (out_static == 0 || in_static % out_static != 0) return Dim();
  return Dim(in_static / out_static);
}

// The target shape as import-time values: the opset-1 attribute, or the shape input when it is
// constant or computed from known dims.
std::optional<SymValues> reshape_target_values(const InferContext& ctx) {
  if (ctx.opset() < 5) {
    SymValues v;
    for (int64_t x : ctx.attr_ints("shape")) v.push_back(SymValue::of(x));
    return v;
  }
  if (auto numbers = constant_ints(ctx, 1)) {
    SymValues v;
    for (int64_t x : *numbers) v.push_back(SymValue::of(x));
    return v;
  }
  return input_sym_values(ctx, 1);
}

void infer_reshape(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  std::optional<SymValues> shape = reshape_target_values(ctx);
  if (!shape) {
    std::optional<int64_t> len = static_length(ctx, 1);
    ctx.set_output_type(
        0, TypeInfo::tensor(
               t->dtype,
               len ? std::optional<Shape>(unknown_dims(static_cast<size_t>(*len))) : std::nullopt));
    return;
  }
  bool allowzero = ctx.attr_int("allowzero", 0) != 0;
  std::vector<Dim> out;
  int64_t infer_at = -1;
  for (size_t i = 0; i < shape->size(); ++i) {
    const SymValue& sv = (*shape)[i];
    if (!sv.number) {
      out.push_back(sv.dim);  // a dim read off another tensor's shape
      continue;
    }
    int64_t v = *sv.number;
    if (v == -1) {
      ctx.check(infer_at < 0, "shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
      out.emplace_back();
    } else if (v == 0 && !allowzero) {
      if (t->shape) {
        ctx.check(i < t->shape->rank(), "shape copies dimension {} but the input has rank {}", i,
                  t->shape->rank());
        out.push_back((*t->shape)[i]);
      } else {
        out.emplace_back();
      }
    } else {
      ctx.check(v >= 0, "invalid dimension {} in shape", v);
      out.emplace_back(v);
    }
  }
  if (infer_at >= 0 && t->shape) {
    std::vector<Dim> others = out;
    others.erase(others.begin() + infer_at);
    out[static_cast<size_t>(infer_at)] = infer_minus_one(*t->shape, others);
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, Shape(std::move(out))));
}

// ---------------------------------------------------------------------------------------------
// Flatten

// Product of dims: static when all are, the lone symbolic dim when the rest are 1, else unknown.
Dim dim_product(const std::vector<Dim>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  std::optional<Dim> lone;
  for (size_t i = begin; i < end; ++i) {
    if (dims[i].is_static()) {
      auto q = mul_dims(p, dims[i].value());
      if (!q) return Dim();
      p = *q;
    } else if (lone) {
      return Dim();
    } else {
      lone = dims[i];
    }
  }
  if (!lone) return Dim(p);
  return p == 1 ? *lone : Dim();
}

int64_t flatten_axis(const AttrReader& ctx, int64_t rank) {
  int64_t axis = ctx.attr_int("axis", 1);
  int64_t a = axis < 0 ? axis + rank : axis;
  ctx.check(a >= 0 && a <= rank, "axis {} is out of range for rank {}", axis, rank);
  return a;
}

void flatten_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = flatten_axis(ctx, static_cast<int64_t>(x.rank()));
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < x.rank(); ++i)
    (static_cast<int64_t>(i) < axis ? outer : inner) *= x.dim(i);
  ctx.set_output(0, x.reshaped({outer, inner}));
}

void infer_flatten(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  if (!t->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype, unknown_dims(2)));
    return;
  }
  const auto& dims = t->shape->dims();
  size_t axis = static_cast<size_t>(flatten_axis(ctx, static_cast<int64_t>(dims.size())));
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, Shape({dim_product(dims, 0, axis),
                                                           dim_product(dims, axis, dims.size())})));
}

// ---------------------------------------------------------------------------------------------
// Squeeze / Unsqueeze: axes are an attribute before opset 13 and an optional input after.

std::optional<std::vector<int64_t>> squeeze_axes(const KernelContext& ctx) {
  if (ctx.opset() < 13) {
    if (!ctx.has_attr("axes")) return std::nullopt;
    return ctx.attr_ints("axes");
  }
  if (!ctx.has_input(1)) return std::nullopt;
  return index_values(ctx, ctx.input(1), "axes");
}

std::optional<std::vector<int64_t>> infer_axes(const InferContext& ctx, bool* known) {
  *known = true;
  if (ctx.opset() < 13) {
    if (!ctx.has_attr("axes")) return std::nullopt;
    return ctx.attr_ints("axes");
  }
  if (!ctx.has_input(1)) return std::nullopt;
  auto c = constant_ints(ctx, 1);
  if (!c) *known = false;
  return c;
}

void squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> drop(x.rank(), false);
  auto axes = squeeze_axes(ctx);
  if (ctx.opset() < 13 && axes && axes->empty()) axes.reset();  // empty attribute: squeeze all
  if (axes) {
    for (int64_t a : normalize_axes(ctx, *axes, rank)) {
      ctx.check(x.dim(static_cast<size_t>(a)) == 1, "cannot squeeze axis {} of size {}", a,
                x.dim(static_cast<size_t>(a)));
      drop[static_cast<size_t>(a)] = true;
    }
  } else {
    for (size_t i = 0; i < x.rank(); ++i) drop[i] = x.dim(i) == 1;
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!drop[i]) out.push_back(x.dim(i));
  }
  ctx.set_output(0, x.reshaped(out));
}

void infer_squeeze(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  bool known = true;
  auto axes = infer_axes(ctx, &known);
  if (ctx.opset() < 13 && axes && axes->empty()) axes.reset();
  if (!t->shape || !known) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype));
    return;
  }
  const Shape& s = *t->shape;
  std::vector<bool> drop(s.rank(), false);
  if (axes) {
    for (int64_t a : normalize_axes(ctx, *axes, static_cast<int64_t>(s.rank()))) {
      const Dim& d = s[static_cast<size_t>(a)];
      ctx.check(!d.is_static() || d.value() == 1, "cannot squeeze axis {} of size {}", a,
                d.value());
      drop[static_cast<size_t>(a)] = true;
    }
  } else {
    for (size_t i = 0; i < s.rank(); ++i) {
      if (!s[i].is_static()) {  // might be 1 at run time: rank unknown
        ctx.set_output_type(0, TypeInfo::tensor(t->dtype));
        return;
      }
      drop[i] = s[i].value() == 1;
    }
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < s.rank(); ++i) {
    if (!drop[i]) out.push_back(s[i]);
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, Shape(std::move(out))));
}

// Positions (in the output) that Unsqueeze inserts, as a mask over the output rank.
std::vector<bool> unsqueeze_mask(const AttrReader& ctx, const std::vector<int64_t>& axes,
                                 int64_t in_rank) {
  int64_t out_rank = in_rank + static_cast<int64_t>(axes.size());
  std::vector<bool> mask(static_cast<size_t>(out_rank), false);
  for (int64_t a : normalize_axes(ctx, axes, out_rank)) mask[static_cast<size_t>(a)] = true;
  return mask;
}

void unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto axes = squeeze_axes(ctx);
  ctx.check(axes.has_value(), "axes are required");
  std::vector<bool> mask = unsqueeze_mask(ctx, *axes, static_cast<int64_t>(x.rank()));
  std::vector<int64_t> out;
  size_t j = 0;
  for (bool m : mask) out.push_back(m ? 1 : x.dim(j++));
  ctx.set_output(0, x.reshaped(out));
}

void infer_unsqueeze(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  bool known = true;
  auto axes = infer_axes(ctx, &known);
  if (!t->shape || !axes) {
    std::optional<Shape> shape;
    if (t->shape && !known) {
      if (auto len = static_length(ctx, 1)) shape = unknown_dims(t->shape->rank() + *len);
    }
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype, shape));
    return;
  }
  std::vector<bool> mask = unsqueeze_mask(ctx, *axes, static_cast<int64_t>(t->shape->rank()));
  std::vector<Dim> out;
  size_t j = 0;
  for (bool m : mask) out.push_back(m ? Dim(1) : (*t->shape)[j++]);
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, Shape(std::move(out))));
}

// ---------------------------------------------------------------------------------------------
// Transpose

std::vector<int64_t> transpose_perm(const AttrReader& ctx, size_t rank) {
  std::vector<int64_t> perm;
  if (ctx.has_attr("perm")) {
    perm = ctx.attr_ints("perm");
    ctx.check(perm.size() == rank, "perm has {} entries for rank {}", perm.size(), rank);
    perm = normalize_axes(ctx, perm, static_cast<int64_t>(rank));
  } else {
    for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  return perm;
}

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> perm = transpose_perm(ctx, x.rank());
  std::vector<int64_t> in_strides = row_major_strides(x.dims());
  std::vector<int64_t> out_dims(x.rank()), strides(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) {
    out_dims[i] = x.dim(static_cast<size_t>(perm[i]));
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& idx) {
                   return flat_offset(idx, strides);
                 }));
}

void infer_transpose(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  if (!t->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(t->dtype));
    return;
  }
  std::vector<int64_t> perm = transpose_perm(ctx, t->shape->rank());
  std::vector<Dim> out;
  for (int64_t p : perm) out.push_back((*t->shape)[static_cast<size_t>(p)]);
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, Shape(std::move(out))));
}

// ---------------------------------------------------------------------------------------------
// Expand / Tile

void expand_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& s = ctx.input(1);
  ctx.check(s.rank() == 1, "shape input must be 1-D, got {}", s.describe());
  std::vector<int64_t> shape = index_values(ctx, s, "shape");
  for (int64_t d : shape) ctx.check(d >= 0, "invalid dimension {} in shape", d);
  std::vector<int64_t> out_dims = broadcast_dims(ctx, {x.dims(), shape});
  checked_numel(ctx, out_dims);
  std::vector<int64_t> strides = broadcast_strides(x.dims(), out_dims);
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& idx) {
                   return flat_offset(idx, strides);
                 }));
}

void infer_expand(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  std::optional<Shape> out;
  if (auto shape = input_sym_values(ctx, 1)) {
    std::vector<Dim> target;
    for (const SymValue& v : *shape) target.push_back(v.as_dim());
    out = broadcast_shapes(ctx, t->shape, Shape(std::move(target)));
  } else if (auto len = static_length(ctx, 1); len && t->shape) {
    out = unknown_dims(std::max<size_t>(t->shape->rank(), static_cast<size_t>(*len)));
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

// Repeats per axis: the `repeats` input (opset 6+) or, for opset 1, `tiles` copies along `axis`.
std::vector<int64_t> tile_repeats(const KernelContext& ctx, size_t rank) {
  if (ctx.opset() < 6) {
    ctx.check(rank >= 1, "input must have rank >= 1");
    std::vector<int64_t> reps(rank, 1);
    const Tensor& tiles = ctx.input(1);
    const Tensor& axis = ctx.input(2);
    ctx.check(tiles.numel() == 1 && axis.numel() == 1, "tiles and axis must be scalars");
    int64_t a = normalize_axis(ctx, index_values(ctx, axis, "axis")[0], static_cast<int64_t>(rank));
    reps[static_cast<size_t>(a)] = index_values(ctx, tiles, "tiles")[0];
    return reps;
  }
  const Tensor& r = ctx.input(1);
  ctx.check(r.rank() == 1, "repeats must be 1-D, got {}", r.describe());
  return index_values(ctx, r, "repeats");
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> reps = tile_repeats(ctx, x.rank());
  ctx.check(reps.size() == x.rank(), "repeats has {} entries for rank {}", reps.size(), x.rank());
  std::vector<int64_t> out_dims(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) {
    ctx.check(reps[i] >= 0, "negative repeat {}", reps[i]);
    if (reps[i] != 0 && x.dim(i) > std::numeric_limits<int64_t>::max() / reps[i]) {
      ctx.fail("tiled dimension overflows");
    }
    out_dims[i] = x.dim(i) * reps[i];
  }
  checked_numel(ctx, out_dims);
  std::vector<int64_t> strides = row_major_strides(x.dims());
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& idx) {
                   int64_t off = 0;
                   for (size_t i = 0; i < idx.size(); ++i) off += (idx[i] % x.dim(i)) * strides[i];
                   return off;
                 }));
}

void infer_tile(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  std::optional<Shape> out;
  if (t->shape) {
    out = unknown_dims(t->shape->rank());
    auto reps = ctx.opset() >= 6 ? constant_ints(ctx, 1) : std::nullopt;
    if (reps && reps->size() == t->shape->rank()) {
      for (size_t i = 0; i < reps->size(); ++i) {
        const Dim& d = (*t->shape)[i];
        if ((*reps)[i] == 1) {
          (*out)[i] = d;
        } else if (d.is_static() && (*reps)[i] >= 0) {
          if (auto v = mul_dims(d.value(), (*reps)[i])) (*out)[i] = Dim(*v);
        }
      }
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// ConstantOfShape

Tensor constant_of_shape_value(const AttrReader& ctx) {
  if (!ctx.has_attr("value")) return Tensor::scalar(0.0f);
  const Tensor& v = ctx.attr_tensor("value");
  ctx.check(v.numel() == 1, "value must hold exactly one element, got {}", v.describe());
  return v;
}

void constant_of_shape_kernel(KernelContext& ctx) {
  const Tensor& s = ctx.input(0);
  ctx.check(s.rank() == 1, "input must be a 1-D shape, got {}", s.describe());
  std::vector<int64_t> dims = index_values(ctx, s, "shape");
  checked_numel(ctx, dims);
  Tensor value = constant_of_shape_value(ctx);
  ctx.set_output(0, remap(value, dims, [](const std::vector<int64_t>&) { return int64_t{0}; }));
}

void infer_constant_of_shape(InferContext& ctx) {
  DataType dtype = constant_of_shape_value(ctx).dtype();
  std::optional<Shape> out;
  if (auto dims = input_sym_values(ctx, 0)) {
    std::vector<Dim> shape;
    for (const SymValue& v : *dims) shape.push_back(v.as_dim());
    out = Shape(std::move(shape));
  } else if (auto len = static_length(ctx, 0)) {
    out = unknown_dims(static_cast<size_t>(*len));
  }
  ctx.set_output_type(0, TypeInfo::tensor(dtype, out));
}

KILN_REGISTER_OP({.op_type = "Shape",
                  .kernel = shape_kernel,
                  .infer = lenient<infer_shape>,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Size",
                  .kernel = size_kernel,
                  .infer = lenient<infer_size>,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Reshape",
                  .kernel = reshape_kernel,
                  .infer = lenient<infer_reshape>,
                  .traits = {.view = true,
                             .shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP(
    {.op_type = "Flatten",
     .kernel = flatten_kernel,
     .infer = lenient<infer_flatten>,
     .traits = {.view = true, .fp16 = {.safe = true}, .quantization = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Squeeze",
                  .kernel = squeeze_kernel,
                  .infer = lenient<infer_squeeze>,
                  .traits = {.view = true,
                             .shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Unsqueeze",
                  .kernel = unsqueeze_kernel,
                  .infer = lenient<infer_unsqueeze>,
                  .traits = {.view = true,
                             .shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Transpose",
                  .kernel = transpose_kernel,
                  .infer = lenient<infer_transpose>,
                  .traits = {.fp16 = {.safe = true}, .quantization = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Expand",
                  .kernel = expand_kernel,
                  .infer = lenient<infer_expand>,
                  .traits = {.shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Tile",
                  .kernel = tile_kernel,
                  .infer = lenient<infer_tile>,
                  .traits = {.shape_inputs = slots({1}),
                             .fp16 = {.safe = true},
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "ConstantOfShape",
                  .kernel = constant_of_shape_kernel,
                  .infer = lenient<infer_constant_of_shape>,
                  .traits = {.shape_inputs = slots({0}), .flops = flops_zero}});

}  // namespace
}  // namespace kiln::ops
