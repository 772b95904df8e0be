#pragma once
// Helpers shared by the reduction-like kernels (Reduce*, ArgMax/ArgMin, normalizations, losses):
// index loops that map every input element to its reduced output slot, and float promotion.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ops/op_utils.hpp"

// A nested namespace keeps these inline helpers from colliding (ODR) with same-named helpers
// other op families may define in their own headers.
namespace kiln::ops::reduction {

// The type reference kernels accumulate floating-point values in: double for every float type,
// so float and float16 sums do not lose precision against the (double-ish numpy) references.
template <typename T>
using AccumOf = std::conditional_t<std::is_floating_point_v<T> || std::is_same_v<T, Float16> ||
                                       std::is_same_v<T, BFloat16>,
                                   double, T>;

template <typename T>
inline constexpr bool kIsFloatLike =
    std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
double to_double(const T& v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Rounds a double result into T once (half types via float, integers truncate like numpy's
// astype; NaN or out-of-range values for integer types become 0 rather than UB).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    if (std::isnan(v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::min()))
      return std::numeric_limits<T>::min();
    if (v >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

// Calls fn(in_offset, out_offset) for every element of a tensor with `dims`, where out_offset
// is the row-major offset into the tensor with the `reduced` axes collapsed to size 1.
template <typename Fn>
void for_each_reduced(const std::vector<int64_t>& dims, const std::vector<bool>& reduced, Fn&& fn) {
  std::vector<int64_t> out_dims = dims;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (reduced[i]) out_dims[i] = 1;
  }
  std::vector<int64_t> out_strides = row_major_strides(out_dims);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (reduced[i]) out_strides[i] = 0;
  }
  const size_t rank = dims.size();
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  std::vector<int64_t> index(rank, 0);
  int64_t out = 0;
  for (int64_t i = 0; i < total; ++i) {
    fn(i, out);
    for (size_t ax = rank; ax-- > 0;) {
      if (++index[ax] < dims[ax]) {
        out += out_strides[ax];
        break;
      }
      out -= out_strides[ax] * (dims[ax] - 1);
      index[ax] = 0;
    }
  }
}

// Splits dims at `axis` into (outer, axis length, inner) element counts.
struct AxisSplit {
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
};
inline AxisSplit split_at_axis(const std::vector<int64_t>& dims, size_t axis) {
  AxisSplit s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < axis)
      s.outer *= dims[i];
    else if (i == axis)
      s.length = dims[i];
    else
      s.inner *= dims[i];
  }
  return s;
}

// Product of dims[begin, end).
inline int64_t dims_product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) p *= dims[i];
  return p;
}

// All elements of a float tensor (any float type) as double; Unsupported for other types.
inline std::vector<double> float_values(const Tensor& t, std::string_view context) {
  return dispatch_dtype<DTypeSet::Float>(t.dtype(), context, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = to_double(p[i]);
    return v;
  });
}

// A float tensor of `dtype` holding `values` rounded once.
inline Tensor float_tensor(DataType dtype, const std::vector<int64_t>& dims,
                           const std::vector<double>& values, std::string_view context) {
  return dispatch_dtype<DTypeSet::Float>(dtype, context, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out(dtype, dims);
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = from_double<T>(values[static_cast<size_t>(i)]);
    return out;
  });
}

}  // namespace kiln::ops::reduction
