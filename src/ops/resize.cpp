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

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

enum class Mode { Nearest, Linear, Cubic };

struct ResizeAttrs {
  Mode mode = Mode::Nearest;
  std::string coord = "half_pixel";
  std::string nearest = "round_prefer_floor";  // "simple": Resize-10/Upsample rule
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0.0;
};

// Interpolation along one axis: for each output index, taps (source index, weight) or a flag
// that the output takes the extrapolation value.
struct AxisPlan {
  int64_t in = 0, out = 0;
  double scale = 1.0;
  double roi_start = 0.0, roi_end = 1.0;
  bool identity = true;
  int64_t taps = 1;
  std::vector<int64_t> index;     // out * taps, clamped into [0, in)
  std::vector<double> weight;     // out * taps
  std::vector<char> extrapolate;  // out
};

Mode parse_mode(const AttrReader& ctx, const std::string& m) {
  if (m == "nearest") return Mode::Nearest;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return Mode::Linear;
  if (m == "cubic" || m == "bicubic") return Mode::Cubic;
  ctx.fail("unknown mode '{}'", m);
}

ResizeAttrs read_attrs(const AttrReader& ctx, bool legacy) {
  ResizeAttrs a;
  a.mode = parse_mode(ctx, ctx.attr_string("mode", "nearest"));
  if (legacy) {
    // Resize-10 and Upsample: asymmetric coordinates; nearest floors when enlarging and
    // ceils when shrinking (what runtimes implemented for these versions).
    a.coord = "asymmetric";
    a.nearest = "simple";
    ctx.check(a.mode != Mode::Cubic, "cubic mode needs Resize-11 or later");
    return a;
  }
  a.coord = ctx.attr_string("coordinate_transformation_mode", "half_pixel");
  static const std::set<std::string> kCoords = {
      "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",  "align_corners",
      "asymmetric", "tf_crop_and_resize",   "tf_half_pixel_for_nn"};
  ctx.check(kCoords.count(a.coord) > 0, "unknown coordinate_transformation_mode '{}'", a.coord);
  a.nearest = ctx.attr_string("nearest_mode", "round_prefer_floor");
  ctx.check(a.nearest == "round_prefer_floor" || a.nearest == "round_prefer_ceil" ||
                a.nearest == "floor" || a.nearest == "ceil",
            "unknown nearest_mode '{}'", a.nearest);
  a.cubic_a = ctx.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = ctx.attr_int("exclude_outside", 0) != 0;
  a.antialias = ctx.attr_int("antialias", 0) != 0;
  a.extrapolation = ctx.attr_float("extrapolation_value", 0.0f);
  return a;
}

double cubic_weight(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// Fills the taps of `p` (in, out, scale, roi set) for the given attributes.
void plan_axis(const AttrReader& ctx, const ResizeAttrs& a, AxisPlan& p) {
  ctx.check(p.in > 0 || p.out == 0, "cannot resize an empty axis to {} elements", p.out);
  ctx.check(std::isfinite(p.roi_start) && std::isfinite(p.roi_end), "roi values must be finite");
  if (p.out == 0) return;
  const double in = static_cast<double>(p.in);
  const double out_f = p.scale * in;  // the (possibly fractional) resized length
  // Antialiasing widens the filter by 1/scale when shrinking.
  const double fscale = a.antialias ? std::min(p.scale, 1.0) : 1.0;
  if (a.mode != Mode::Nearest) {
    // An antialiasing filter spans about 2/scale taps (4/scale for cubic) per output.
    const double width = (a.mode == Mode::Linear ? 2.0 : 4.0) / fscale + 2.0;
    ctx.check(width * static_cast<double>(p.out) <= 1e9,
              "interpolation filter of {} taps for {} outputs is too large", width, p.out);
  }
  int64_t start = 0;
  if (a.mode == Mode::Nearest) {
    p.taps = 1;
  } else if (a.mode == Mode::Linear) {
    start = static_cast<int64_t>(std::floor(-1.0 / fscale)) + 1;
    p.taps = 2 - 2 * start;
  } else {
    start = static_cast<int64_t>(std::floor(-2.0 / fscale)) + 1;
    p.taps = 2 - 2 * start;
  }
  check_scratch(ctx, p.out * p.taps, sizeof(int64_t) + sizeof(double));
  p.index.assign(static_cast<size_t>(p.out * p.taps), 0);
  p.weight.assign(static_cast<size_t>(p.out * p.taps), 0.0);
  p.extrapolate.assign(static_cast<size_t>(p.out), 0);
  for (int64_t y = 0; y < p.out; ++y) {
    const double yd = static_cast<double>(y);
    double x = 0;
    if (a.coord == "half_pixel") {
      x = (yd + 0.5) / p.scale - 0.5;
    } else if (a.coord == "half_pixel_symmetric") {
      const double adjustment = static_cast<double>(p.out) / out_f;
      x = (in / 2) * (1 - adjustment) + (yd + 0.5) / p.scale - 0.5;
    } else if (a.coord == "pytorch_half_pixel") {
      x = out_f == 1 ? -0.5 : (yd + 0.5) / p.scale - 0.5;
    } else if (a.coord == "align_corners") {
      x = out_f == 1 ? 0.0 : yd * (in - 1) / (out_f - 1);
    } else if (a.coord == "asymmetric") {
      x = yd / p.scale;
    } else if (a.coord == "tf_half_pixel_for_nn") {
      x = (yd + 0.5) / p.scale;
    } else {  // tf_crop_and_resize
      const double span = (p.roi_end - p.roi_start) * (in - 1);
      x = out_f == 1 ? span / 2 : yd * span / (out_f - 1);
      x += p.roi_start * (in - 1);
      if (x < 0 || x > in - 1) p.extrapolate[y] = 1;
    }
    x = std::clamp(x, -9.0e15, 9.0e15);  // indices get clamped anyway; keeps the cast defined
    int64_t* idx = p.index.data() + y * p.taps;
    double* w = p.weight.data() + y * p.taps;
    // An integral coordinate counts as ratio 1 from the index below it, so the tap window is
    // placed the same way for every coordinate.
    const double fl = std::floor(x);
    const bool integral = x == fl;
    const int64_t base = static_cast<int64_t>(fl) - (integral ? 1 : 0);
    const double ratio = integral ? 1.0 : x - fl;
    if (a.mode == Mode::Nearest) {
      int64_t pick;
      if (integral) {
        pick = base + 1;
      } else if (a.nearest == "simple") {
        pick = p.scale < 1 ? base + 1 : base;
      } else if (a.nearest == "floor") {
        pick = base;
      } else if (a.nearest == "ceil") {
        pick = base + 1;
      } else if (a.nearest == "round_prefer_floor") {
        pick = ratio <= 0.5 ? base : base + 1;
      } else {
        pick = ratio < 0.5 ? base : base + 1;
      }
      idx[0] = std::clamp<int64_t>(pick, 0, p.in - 1);
      w[0] = 1.0;
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < p.taps; ++j) {
      const double d = static_cast<double>(start + j) - ratio;  // tap offset from x
      double c;
      if (a.mode == Mode::Linear) {
        c = a.antialias ? std::clamp(1 - std::fabs(d * fscale), 0.0, 1.0) : 1 - std::fabs(d);
      } else {
        c = cubic_weight(d * fscale, a.cubic_a);
      }
      const int64_t src = base + start + j;
      if (a.exclude_outside && (src < 0 || src >= p.in)) c = 0;
      idx[j] = std::clamp<int64_t>(src, 0, p.in - 1);
      w[j] = c;
      sum += c;
    }
    if (a.antialias || a.exclude_outside) {
      if (sum == 0) sum = 1;
      for (int64_t j = 0; j < p.taps; ++j) w[j] /= sum;
    }
  }
}

// Resolved output geometry: per-axis scale/out size/roi, and the order to process axes.
struct ResizePlan {
  std::vector<AxisPlan> axes;  // one per input dim
  std::vector<int64_t> order;  // dims to process, in this order
  std::vector<int64_t> out_dims;
};

bool near(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
}

// Per-axis sizes, scales and roi. scales_in / sizes_in have one entry per resized axis
// (`axes`); exactly one is non-empty.
std::vector<AxisPlan> resolve_axes(const AttrReader& ctx, const std::vector<int64_t>& dims,
                                   const std::vector<int64_t>& axes,
                                   const std::vector<double>& scales_in,
                                   const std::vector<int64_t>& sizes_in,
                                   const std::vector<double>& roi) {
  const size_t rank = dims.size();
  std::vector<AxisPlan> plan(rank);
  for (size_t d = 0; d < rank; ++d) {
    plan[d].in = dims[d];
    plan[d].out = dims[d];
  }
  if (!roi.empty()) {
    ctx.check(roi.size() == 2 * axes.size(), "roi has {} values, expected {}", roi.size(),
              2 * axes.size());
    for (size_t i = 0; i < axes.size(); ++i) {
      plan[axes[i]].roi_start = roi[i];
      plan[axes[i]].roi_end = roi[axes.size() + i];
    }
  }
  if (!sizes_in.empty()) {
    ctx.check(sizes_in.size() == axes.size(), "sizes has {} values, expected {}", sizes_in.size(),
              axes.size());
    for (size_t i = 0; i < axes.size(); ++i) {
      ctx.check(sizes_in[i] >= 0, "sizes must be non-negative, got {}", sizes_in[i]);
      AxisPlan& p = plan[axes[i]];
      ctx.check(p.in > 0, "cannot compute a scale for empty axis {}", axes[i]);
      p.out = sizes_in[i];
      p.scale = static_cast<double>(p.out) / static_cast<double>(p.in);
    }
    std::string policy = ctx.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      ctx.check(policy == "not_larger" || policy == "not_smaller",
                "unknown keep_aspect_ratio_policy '{}'", policy);
      double s = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t ax : axes) {
        s = policy == "not_larger" ? std::min(s, plan[ax].scale) : std::max(s, plan[ax].scale);
      }
      for (int64_t ax : axes) {
        AxisPlan& p = plan[ax];
        p.scale = s;
        p.out = static_cast<int64_t>(s * static_cast<double>(p.in) + 0.5);  // round half up
      }
    }
  } else {
    ctx.check(scales_in.size() == axes.size(), "scales has {} values, expected {}",
              scales_in.size(), axes.size());
    for (size_t i = 0; i < axes.size(); ++i) {
      ctx.check(scales_in[i] > 0, "scales must be positive, got {}", scales_in[i]);
      AxisPlan& p = plan[axes[i]];
      p.scale = scales_in[i];
      const double out = std::floor(scales_in[i] * static_cast<double>(p.in));
      ctx.check(out < 9.0e15, "output size {} is too large", out);
      p.out = static_cast<int64_t>(out);
    }
  }
  return plan;
}

ResizePlan make_plan(const AttrReader& ctx, const ResizeAttrs& a, const std::vector<int64_t>& dims,
                     const std::vector<int64_t>& axes, const std::vector<double>& scales_in,
                     const std::vector<int64_t>& sizes_in, const std::vector<double>& roi) {
  ResizePlan plan;
  plan.axes = resolve_axes(ctx, dims, axes, scales_in, sizes_in, roi);
  plan.order = axes;
  for (AxisPlan& p : plan.axes) plan.out_dims.push_back(p.out);
  ctx.check(shape_numel(plan.out_dims) <= static_cast<int64_t>(Tensor::max_bytes()),
            "output {} is too large", dims_to_string(plan.out_dims));
  for (AxisPlan& p : plan.axes) {
    p.identity =
        near(p.scale, 1.0) && p.out == p.in && near(p.roi_start, 0.0) && near(p.roi_end, 1.0);
    if (!p.identity) plan_axis(ctx, a, p);
  }
  return plan;
}

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

std::vector<int64_t> resize_axes(const AttrReader& ctx, size_t rank) {
  std::vector<int64_t> axes;
  if (ctx.has_attr("axes")) {
    std::set<int64_t> seen;
    for (int64_t ax : ctx.attr_ints("axes")) {
      int64_t n = normalize_axis(ctx, ax, static_cast<int64_t>(rank));
      ctx.check(seen.insert(n).second, "axis {} repeats in axes", ax);
      axes.push_back(n);
    }
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  return axes;
}

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.double_at(i);
  return v;
}

void resize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool legacy = ctx.opset() < 11;
  ResizeAttrs a = read_attrs(ctx, legacy);
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
  ResizePlan plan = make_plan(ctx, a, x.dims(), axes, scales, sizes, roi);
  ctx.set_output(0, run_resize(ctx, x, a, plan));
}

void upsample(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() < 7) ctx.unsupported("Upsample-1 (experimental) is not supported");
  ResizeAttrs a = read_attrs(ctx, true);
  ctx.check(a.mode != Mode::Cubic, "Upsample supports nearest and linear only");
  std::vector<double> scales;
  if (ctx.opset() < 9) {
    for (float s : ctx.attr_floats("scales")) scales.push_back(s);
  } else {
    scales = doubles_of(ctx.input(1));
  }
  for (double s : scales) ctx.check(s >= 1, "Upsample scales must be >= 1, got {}", s);
  std::vector<int64_t> axes = resize_axes(ctx, x.rank());
  ResizePlan plan = make_plan(ctx, a, x.dims(), axes, scales, {}, {});
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
