#pragma once
// Helpers shared by the element-wise op files (unary math, activations, logic, cast):
// float-family maps computed in double, and the pre-opset-7 "broadcast"/"axis" binary form.
#include <cmath>
#include <limits>
#include <string_view>
#include <type_traits>

#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"

namespace kiln::ops {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;

// Widens any real element to double (half types have no direct double conversion).
template <typename T>
double to_double(T v) {
  if constexpr (is_half_v<T>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Narrows a double to a float-family element type; half types round through float.
template <typename T>
T from_double(double v) {
  if constexpr (is_half_v<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// double -> integer T without undefined behaviour: truncates toward zero, saturates out-of-range
// values and maps NaN to 0 (the spec leaves these cases undefined).
template <typename T>
T saturate_to_int(double v) {
  if (std::isnan(v)) return T(0);
  v = std::trunc(v);
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) {
    return std::numeric_limits<T>::lowest();
  }
  // max() may round up when converted to double, so compare with >=.
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

// out = fn(x) for float element types, computing in double and rounding once on store.
template <typename Fn>
Tensor map_float(const Tensor& x, std::string_view context, Fn&& fn) {
  return dispatch_dtype<DTypeSet::Float>(x.dtype(), context, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_unary<T, T>(x, [&](T v) { return from_double<T>(fn(to_double(v))); });
  });
}

// Before opset 7 binary ops did not broadcast numpy-style: without broadcast=1 the shapes must
// match, and with it B is aligned to A starting at `axis` (suffix-aligned when axis is absent).
// Returns B reshaped so that numpy broadcasting then gives the legacy result.
Tensor legacy_broadcast_operand(const KernelContext& ctx, const Tensor& a, const Tensor& b);

// Shape inference for binary ops that also exist in the pre-opset-7 form: the legacy output has
// A's shape; newer opsets broadcast. `bool_out` gives a bool element type (comparisons, logic).
void infer_binary_legacy(InferContext& ctx, bool bool_out);
inline void infer_binary_legacy_same(InferContext& ctx) {
  infer_binary_legacy(ctx, false);
}
inline void infer_binary_legacy_bool(InferContext& ctx) {
  infer_binary_legacy(ctx, true);
}

// Output 0 has input 0's shape and the given element type.
void infer_same_shape_as(InferContext& ctx, DataType dtype);

}  // namespace kiln::ops
