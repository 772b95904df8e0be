#include "ops/conv_utils.hpp"

#include <algorithm>

namespace kiln::ops::window {

std::vector<int64_t> spatial_ints(const AttrReader& ctx, const std::string& name, size_t n,
                                  int64_t fallback, int64_t min_value) {
  std::vector<int64_t> v = ctx.attr_ints(name, std::vector<int64_t>(n, fallback));
  if (v.empty()) v.assign(n, fallback);  // some exporters write an empty list for "default"
  ctx.check(v.size() == n, "attribute '{}' has {} entries, expected {}", name, v.size(), n);
  for (int64_t x : v) {
    ctx.check(x >= min_value, "attribute '{}' entry {} must be >= {}", name, x, min_value);
    // Keeps window arithmetic (products of kernel, dilation, stride, pads) far from overflow.
    ctx.check(x <= kMaxWindowValue, "attribute '{}' entry {} is too large", name, x);
  }
  return v;
}

WindowGeometry forward_geometry(const AttrReader& ctx, const std::vector<int64_t>& in,
                                const std::vector<int64_t>& kernel, bool ceil_mode,
                                bool allow_dilations) {
  WindowGeometry g;
  g.nsp = kernel.size();
  ctx.check(in.size() == g.nsp, "kernel has {} spatial dims but the input has {}", g.nsp,
            in.size());
  g.in = in;
  g.kernel = kernel;
  for (int64_t k : kernel) {
    ctx.check(k > 0 && k <= kMaxWindowValue, "kernel dims must be in [1, {}], got {}",
              kMaxWindowValue, k);
  }
  g.strides = spatial_ints(ctx, "strides", g.nsp, 1, 1);
  g.dilations = allow_dilations ? spatial_ints(ctx, "dilations", g.nsp, 1, 1)
                                : std::vector<int64_t>(g.nsp, 1);
  std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  g.pads.assign(2 * g.nsp, 0);
  g.out.assign(g.nsp, -1);
  if (auto_pad == "NOTSET") {
    g.pads = spatial_ints(ctx, "pads", 2 * g.nsp, 0, 0);
  } else if (auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    ctx.fail("unknown auto_pad '{}'", auto_pad);
  }
  for (size_t d = 0; d < g.nsp; ++d) {
    if (in[d] < 0) continue;
    const int64_t ek = g.effective_kernel(d);
    const int64_t s = g.strides[d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[d] = (in[d] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (g.out[d] - 1) * s + ek - in[d]);
      int64_t small = total / 2;
      g.pads[d] = auto_pad == "SAME_UPPER" ? small : total - small;
      g.pads[g.nsp + d] = total - g.pads[d];
      continue;
    }
    int64_t span = in[d] + g.pads[d] + g.pads[g.nsp + d] - ek;
    ctx.check(span >= 0, "window of {} (kernel {}, dilation {}) is larger than the padded input {}",
              ek, kernel[d], g.dilations[d], in[d] + g.pads[d] + g.pads[g.nsp + d]);
    if (ceil_mode && auto_pad == "NOTSET") {
      g.out[d] = (span + s - 1) / s + 1;
      // The last window must start inside the input or the leading padding.
      if ((g.out[d] - 1) * s >= in[d] + g.pads[d]) --g.out[d];
    } else {
      g.out[d] = span / s + 1;
    }
  }
  return g;
}

std::vector<int64_t> static_or_unknown(const Shape& s, size_t first) {
  std::vector<int64_t> v;
  for (size_t i = first; i < s.rank(); ++i) v.push_back(s[i].is_static() ? s[i].value() : -1);
  return v;
}

std::optional<Shape> window_output_shape(const AttrReader& ctx, const std::optional<Shape>& x,
                                         const Dim& channels, const std::vector<int64_t>& kernel,
                                         bool ceil_mode, bool allow_dilations) {
  if (!x) return std::nullopt;
  ctx.check(x->rank() >= 3, "input must have rank >= 3 (N, C, spatial...), got {}", x->rank());
  std::vector<Dim> dims = {(*x)[0], channels};
  if (kernel.size() != x->rank() - 2) {
    for (size_t i = 2; i < x->rank(); ++i) dims.emplace_back();
    return Shape(dims);
  }
  WindowGeometry g =
      forward_geometry(ctx, static_or_unknown(*x, 2), kernel, ceil_mode, allow_dilations);
  for (int64_t o : g.out) dims.push_back(o >= 0 ? Dim(o) : Dim());
  return Shape(dims);
}

}  // namespace kiln::ops::window
