#pragma once
// Resize's plan, shared by the reference kernel (ops/resize.cpp) and the CPU backend's
// (backends/cpu/resize_kernel.cpp), so both compute the same geometry: the attributes, the axes
// resized, each axis's output size, scale and roi, and per output index its taps (source
// indices and weights, or a flag for the extrapolation value).
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops::resizing {

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

// Resolved output geometry: per-axis scale/out size/roi, and the order to process axes.
struct ResizePlan {
  std::vector<AxisPlan> axes;  // one per input dim
  std::vector<int64_t> order;  // dims to process, in this order
  std::vector<int64_t> out_dims;
};

// The attributes; `legacy`: Resize-10 and Upsample (asymmetric, their nearest rule).
ResizeAttrs read_resize_attrs(const AttrReader& ctx, bool legacy);

// The resized axes (the `axes` attribute, else every dim), normalized, none repeated.
std::vector<int64_t> resize_axes(const AttrReader& ctx, size_t rank);

// Per-axis sizes, scales and roi. scales_in / sizes_in have one entry per resized axis
// (`axes`); exactly one is non-empty.
std::vector<AxisPlan> resolve_axes(const AttrReader& ctx, const std::vector<int64_t>& dims,
                                   const std::vector<int64_t>& axes,
                                   const std::vector<double>& scales_in,
                                   const std::vector<int64_t>& sizes_in,
                                   const std::vector<double>& roi);

// The whole plan: the axes resolved, then the taps of every axis that changes.
ResizePlan make_resize_plan(const AttrReader& ctx, const ResizeAttrs& a,
                            const std::vector<int64_t>& dims, const std::vector<int64_t>& axes,
                            const std::vector<double>& scales_in,
                            const std::vector<int64_t>& sizes_in, const std::vector<double>& roi);

}  // namespace kiln::ops::resizing
