#include "ops/resize_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/tensor.hpp"
#include "ops/conv_utils.hpp"
#include "ops/op_utils.hpp"

namespace kiln::ops::resizing {

using namespace window;  // NOLINT: check_scratch

static Mode parse_mode(const AttrReader& ctx, const std::string& m) {
  if (m == "nearest") return Mode::Nearest;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return Mode::Linear;
  if (m == "cubic" || m == "bicubic") return Mode::Cubic;
  ctx.fail("unknown mode '{}'", m);
}

ResizeAttrs read_resize_attrs(const AttrReader& ctx, bool legacy) {
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

static double cubic_weight(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// Fills the taps of `p` (in, out, scale, roi set) for the given attributes.
static void plan_axis(const AttrReader& ctx, const ResizeAttrs& a, AxisPlan& p) {
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

static bool near(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
}

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

ResizePlan make_resize_plan(const AttrReader& ctx, const ResizeAttrs& a,
                            const std::vector<int64_t>& dims, const std::vector<int64_t>& axes,
                            const std::vector<double>& scales_in,
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

}  // namespace kiln::ops::resizing
