#pragma once
// Sliding-window geometry shared by Conv, ConvTranspose, the pooling ops and their integer
// variants: attribute parsing (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
// and output-size rules, plus an odometer over N-D index spaces.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "ops/kernel_context.hpp"

// In their own namespace so other op families can define similarly named helpers.
namespace kiln::ops::window {

// Upper bound for kernel dims, strides, dilations and pads: keeps their products in int64.
inline constexpr int64_t kMaxWindowValue = int64_t{1} << 30;

// Window parameters for `nsp` spatial dims. pads = [begin_0.., end_0..] as in ONNX.
struct WindowGeometry {
  size_t nsp = 0;
  std::vector<int64_t> in;  // input spatial dims, -1 when unknown (shape inference)
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;
  std::vector<int64_t> out;  // output spatial dims, -1 when unknown

  int64_t pad_begin(size_t d) const { return pads[d]; }
  int64_t pad_end(size_t d) const { return pads[nsp + d]; }
  int64_t effective_kernel(size_t d) const { return (kernel[d] - 1) * dilations[d] + 1; }
};

// Reads strides, dilations, pads and auto_pad for a forward window (Conv, pooling) and computes
// the output size. `kernel` has one entry per spatial dim; `in` may hold -1 for unknown dims.
// ceil_mode only applies to explicit padding (pooling).
WindowGeometry forward_geometry(const AttrReader& ctx, const std::vector<int64_t>& in,
                                const std::vector<int64_t>& kernel, bool ceil_mode,
                                bool allow_dilations = true);

// ints attribute `name` with `n` entries, defaulting to `fallback` repeated; checks length and
// that entries are >= `min_value`.
std::vector<int64_t> spatial_ints(const AttrReader& ctx, const std::string& name, size_t n,
                                  int64_t fallback, int64_t min_value);

// Shape of a forward-window op's output (N, channels, out...) from the input type, for shape
// inference. nullopt when the input rank is unknown.
std::optional<Shape> window_output_shape(const AttrReader& ctx, const std::optional<Shape>& x,
                                         const Dim& channels, const std::vector<int64_t>& kernel,
                                         bool ceil_mode, bool allow_dilations = true);

// Spatial input dims of a type as numbers (-1 for non-static dims).
std::vector<int64_t> static_or_unknown(const Shape& s, size_t first);

// Advances a row-major multi-index over `dims`; false after the last index.
inline bool next_index(std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  for (size_t d = index.size(); d-- > 0;) {
    if (++index[d] < dims[d]) return true;
    index[d] = 0;
  }
  return false;
}

// Product of dims; InvalidArgument on overflow (sizes can come from attributes).
inline int64_t product(const std::vector<int64_t>& dims) {
  return shape_numel(dims);
}

// Refuses scratch buffers of `count` elements of `elem_size` bytes beyond the tensor size
// limit, so absurd attributes fail cleanly instead of exhausting memory.
inline void check_scratch(const AttrReader& ctx, int64_t count, size_t elem_size) {
  ctx.check(count >= 0 && static_cast<uint64_t>(count) <= Tensor::max_bytes() / elem_size,
            "a working buffer of {} elements of {} bytes exceeds the size limit", count, elem_size);
}

// Floor division for possibly negative numerators.
inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Element type as read for a kernel that computes through float/double.
template <typename T>
using acc_float_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rounds half to even, as ONNX quantization does.
inline double round_half_even(double v) {
  return std::nearbyint(v);
}

// Rounds half to even and clamps into [lo, hi] (a saturating conversion to an integer type);
// NaN maps to 0 so the later integer cast is always defined.
inline double saturate_round(double v, double lo, double hi) {
  if (std::isnan(v)) return std::clamp(0.0, lo, hi);
  return std::clamp(std::nearbyint(v), lo, hi);
}

}  // namespace kiln::ops::window
