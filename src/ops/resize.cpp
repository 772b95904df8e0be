// Resize (opset 10 and 11+) and Upsample: separable per-axis interpolation. Nearest picks one
// source index per output index and copies elements (any type); linear and cubic (optionally
// antialiased) accumulate weighted taps in double one axis at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/resize_plan.hpp"

namespace kiln::ops {
namespace {

using namespace window;    // NOLINT: shared window/quantization helpers
using namespace resizing;  // NOLINT: Resize's plan (ops/resize_plan.hpp)

// Nearest: copies x[source index per axis] into every output element.
Tensor resize_nearest(const AttrReader& ctx, const Tensor& x, const ResizePlan& plan,
                      const ResizeAttrs& a) {
  const size_t rank = x.rank();
  Tensor y(x.dtype(), plan.out_dims);
  if (y.numel() == 0) return y;
  const std::vector<int64_t> in_strides = row_major_strides(x.dims());
  // Per axis: input offset of each output index, or -1 for "extrapolate".
  std::vector<std::vector<int64_t>> offs(rank);
  for (size_t d = 0; d < rank; ++d) {
    const AxisPlan& p = plan.axes[d];
    offs[d].resize(static_cast<size_t>(p.out));
    for (int64_t o = 0; o < p.out; ++o) {
      if (p.identity) {
        offs[d][o] = o * in_strides[d];
      } else {
        offs[d][o] = p.extrapolate[o] ? -1 : p.index[o] * in_strides[d];
      }
    }
  }
  dispatch_dtype<DTypeSet::All>(x.dtype(), "Resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    T fill{};
    if constexpr (std::is_same_v<T, std::string>) {
      (void)a;
    } else if constexpr (std::is_same_v<T, bool>) {
      fill = a.extrapolation != 0;
    } else {
      fill = static_cast<T>(a.extrapolation);
    }
    std::vector<int64_t> idx(rank, 0);
    for (int64_t i = 0; i < y.numel(); ++i, next_index(idx, plan.out_dims)) {
      int64_t off = 0;
      bool outside = false;
      for (size_t d = 0; d < rank; ++d) {
        int64_t v = offs[d][idx[d]];
        if (v < 0) outside = true;
        off += v;
      }
      py[i] = outside ? fill : px[off];
    }
  });
  (void)ctx;
  return y;
}

// Linear / cubic: separable passes in double, then a saturating cast to the element type.
Tensor resize_interpolate(const AttrReader& ctx, const Tensor& x, const ResizePlan& plan,
                          const ResizeAttrs& a) {
  std::vector<double> cur = dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> v(static_cast<size_t>(x.numel()));
    const T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) v[i] = static_cast<double>(p[i]);
    return v;
  });
  std::vector<int64_t> dims = x.dims();
  for (int64_t ax : plan.order) {
    const AxisPlan& p = plan.axes[ax];
    if (p.identity) continue;
    const int64_t outer = product(std::vector<int64_t>(dims.begin(), dims.begin() + ax));
    const int64_t inner = product(std::vector<int64_t>(dims.begin() + ax + 1, dims.end()));
    const int64_t next_count = product({outer, p.out, inner});
    check_scratch(ctx, next_count, sizeof(double));
    std::vector<double> next(static_cast<size_t>(next_count));
    for (int64_t o = 0; o < outer; ++o) {
      const double* src = cur.data() + o * p.in * inner;
      double* dst = next.data() + o * p.out * inner;
      for (int64_t y = 0; y < p.out; ++y) {
        double* row = dst + y * inner;
        if (p.extrapolate[y]) {
          std::fill(row, row + inner, a.extrapolation);
          continue;
        }
        std::fill(row, row + inner, 0.0);
        for (int64_t t = 0; t < p.taps; ++t) {
          const double w = p.weight[y * p.taps + t];
          if (w == 0) continue;
          const double* s = src + p.index[y * p.taps + t] * inner;
          for (int64_t i = 0; i < inner; ++i) row[i] += w * s[i];
        }
      }
    }
    cur = std::move(next);
    dims[ax] = p.out;
  }
  Tensor y(x.dtype(), plan.out_dims);
  dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* py = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) {
      if constexpr (std::is_integral_v<T>) {
        const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
        const double hi = static_cast<double>(std::numeric_limits<T>::max());
        const double v = round_half_even(cur[i]);
        py[i] = std::isnan(v) ? T(0)
                : v <= lo     ? std::numeric_limits<T>::lowest()
                : v >= hi     ? std::numeric_limits<T>::max()
                              : static_cast<T>(v);
      } else {
        py[i] = static_cast<T>(cur[i]);
      }
    }
  });
  return y;
}

Tensor run_resize(const AttrReader& ctx, const Tensor& x, const ResizeAttrs& a,
                  const ResizePlan& plan) {
  if (a.mode == Mode::Nearest) return resize_nearest(ctx, x, plan, a);
  if (!dtype_is_float(x.dtype()) && !dtype_is_integer(x.dtype()))
    ctx.unsupported("{} interpolation of {} tensors", a.mode == Mode::Linear ? "linear" : "cubic",
                    dtype_name(x.dtype()));
  return resize_interpolate(ctx, x, plan, a);
}

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.double_at(i);
  return v;
}

void resize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool legacy = ctx.opset() < 11;
  ResizeAttrs a = read_resize_attrs(ctx, legacy);
  std::vector<int64_t> axes = resize_axes(ctx, x.rank());
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  if (legacy) {
    scales = doubles_of(ctx.input(1));
  } else {
    if (ctx.has_input(1) && a.coord == "tf_crop_and_resize") roi = doubles_of(ctx.input(1));
    if (ctx.has_input(2)) scales = doubles_of(ctx.input(2));
    if (ctx.has_input(3)) sizes = ctx.input(3).to_int64_vector();
    ctx.check(scales.empty() != sizes.empty(), "exactly one of scales and sizes must be given");
  }
  ResizePlan plan = make_resize_plan(ctx, a, x.dims(), axes, scales, sizes, roi);
  ctx.set_output(0, run_resize(ctx, x, a, plan));
}

void upsample(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() < 7) ctx.unsupported("Upsample-1 (experimental) is not supported");
  ResizeAttrs a = read_resize_attrs(ctx, true);
  ctx.check(a.mode != Mode::Cubic, "Upsample supports nearest and linear only");
  std::vector<double> scales;
  if (ctx.opset() < 9) {
    for (float s : ctx.attr_floats("scales")) scales.push_back(s);
  } else {
    scales = doubles_of(ctx.input(1));
  }
  for (double s : scales) ctx.check(s >= 1, "Upsample scales must be >= 1, got {}", s);
  std::vector<int64_t> axes = resize_axes(ctx, x.rank());
  ResizePlan plan = make_resize_plan(ctx, a, x.dims(), axes, scales, {}, {});
  ctx.set_output(0, run_resize(ctx, x, a, plan));
}

std::vector<double> doubles_of_constant(const Tensor* t) {
  return t ? doubles_of(*t) : std::vector<double>{};
}

// Output shape when sizes or scales are constants; otherwise only the rank is known.
void infer_resize(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (x->shape) {
    const size_t rank = x->shape->rank();
    std::vector<Dim> dims(rank);
    std::vector<int64_t> axes = resize_axes(ctx, rank);
    std::vector<bool> resized(rank, false);
    for (int64_t ax : axes) resized[ax] = true;
    for (size_t d = 0; d < rank; ++d)
      if (!resized[d]) dims[d] = (*x->shape)[d];
    std::vector<double> scales;
    std::vector<int64_t> sizes;
    bool known = true;
    if (ctx.node().op_type() == "Upsample" && ctx.opset() < 9) {
      for (float f : ctx.attr_floats("scales", {})) scales.push_back(f);
    } else if (ctx.opset() < 11 || ctx.node().op_type() == "Upsample") {
      const Tensor* t = ctx.has_input(1) ? ctx.input_constant(1) : nullptr;
      known = t != nullptr;
      scales = doubles_of_constant(t);
    } else {
      const Tensor* s = ctx.has_input(2) ? ctx.input_constant(2) : nullptr;
      const Tensor* z = ctx.has_input(3) ? ctx.input_constant(3) : nullptr;
      if (z && z->numel() > 0) {
        sizes = z->to_int64_vector();
      } else if (s && s->numel() > 0) {
        scales = doubles_of(*s);
      } else {
        known = false;
      }
    }
    const bool stretch = ctx.attr_string("keep_aspect_ratio_policy", "stretch") == "stretch";
    if (known && !sizes.empty() && stretch && sizes.size() == axes.size()) {
      for (size_t i = 0; i < axes.size(); ++i) dims[axes[i]] = Dim(sizes[i]);
    } else if (known) {
      std::vector<int64_t> in = static_or_unknown(*x->shape, 0);
      bool all_static = true;
      for (int64_t ax : axes) all_static = all_static && in[ax] >= 0;
      if (all_static) {
        for (int64_t& v : in) v = std::max<int64_t>(v, 0);
        std::vector<AxisPlan> plan = resolve_axes(ctx, in, axes, scales, sizes, {});
        for (int64_t ax : axes) dims[ax] = Dim(plan[ax].out);
      }
    }
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "Resize",
                  .kernel = resize,
                  .infer = infer_resize,
                  .traits = {.shape_inputs = slots({3}),
                             .fp16 = {.safe = true, .inputs = slots({0})}}});
KILN_REGISTER_OP({.op_type = "Upsample",
                  .kernel = upsample,
                  .infer = infer_resize,
                  .traits = {.fp16 = {.safe = true, .inputs = slots({0})}}});

}  // namespace
}  // namespace kiln::ops
