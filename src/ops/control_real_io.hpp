#pragma once
// Reading and writing real tensors as double, for reference kernels that compute in double
// whatever the element type (float16, bfloat16, float, double).
#include <vector>

#include "ops/op_utils.hpp"

namespace kiln::ops::ctl {

inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.double_at(i);
  return v;
}

// A tensor of `dtype` (a float type) holding `values` rounded once.
inline Tensor from_doubles(DataType dtype, std::vector<int64_t> dims,
                           const std::vector<double>& values, std::string_view context) {
  Tensor out(dtype, std::move(dims));
  dispatch_dtype<DTypeSet::Float>(dtype, context, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      p[i] = convert_element<T>(values[static_cast<size_t>(i)]);
    }
  });
  return out;
}

}  // namespace kiln::ops::ctl
