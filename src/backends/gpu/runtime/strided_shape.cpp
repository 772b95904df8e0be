#include "backends/gpu/runtime/strided_shape.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/shape.hpp"

namespace kiln::backends::gpu {

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

bool broadcast_dims(const std::vector<std::vector<int64_t>>& shapes, std::vector<int64_t>& out) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  out.assign(rank, 1);
  for (const auto& s : shapes) {
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[rank - s.size() + k];
      const int64_t v = s[k];
      if (v == o || v == 1) continue;
      if (o != 1) return false;
      o = v;
    }
  }
  return true;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out) {
  const std::vector<int64_t> own = row_major_strides(dims);
  std::vector<int64_t> s(out.size(), 0);
  const size_t lead = out.size() - dims.size();
  for (size_t k = 0; k < dims.size(); ++k) s[lead + k] = dims[k] == 1 ? 0 : own[k];
  return s;
}

kernels::StridedShape make_strided_shape(const std::vector<int64_t>& dims,
                                         const std::vector<std::vector<int64_t>>& strides,
                                         const char* what) {
  const size_t operands = strides.size();
  KILN_CHECK(operands <= static_cast<size_t>(kernels::kMaxOperands), ErrorCode::Internal,
             "{}: {} operands in a strided walk", what, operands);
  // Innermost first while merging; extent-1 dims move nothing.
  std::vector<int64_t> d;
  std::vector<std::vector<int64_t>> s(operands);
  for (size_t k = dims.size(); k-- > 0;) {
    if (dims[k] == 1) continue;
    bool merge = !d.empty();
    for (size_t o = 0; merge && o < operands; ++o) {
      merge = strides[o][k] == s[o].back() * d.back();
    }
    if (merge) {
      d.back() *= dims[k];
      continue;
    }
    d.push_back(dims[k]);
    for (size_t o = 0; o < operands; ++o) s[o].push_back(strides[o][k]);
  }
  KILN_CHECK(d.size() <= static_cast<size_t>(kernels::kMaxDims), ErrorCode::Unsupported,
             "{} over {} needs {} dims after merging; the GPU kernels walk at most {}", what,
             dims_to_string(dims), d.size(), kernels::kMaxDims);
  kernels::StridedShape out;
  out.rank = static_cast<int>(d.size());
  for (size_t k = 0; k < d.size(); ++k) {
    const size_t at = d.size() - 1 - k;  // back to outermost first
    out.dims[at] = d[k];
    for (size_t o = 0; o < operands; ++o) out.strides[o][at] = s[o][k];
  }
  return out;
}

bool is_suffix_of(const std::vector<int64_t>& param, const std::vector<int64_t>& dims) {
  size_t first = 0;
  while (first < param.size() && param[first] == 1) ++first;
  const size_t n = param.size() - first;
  if (n > dims.size()) return false;
  return std::equal(param.begin() + static_cast<std::ptrdiff_t>(first), param.end(),
                    dims.end() - static_cast<std::ptrdiff_t>(n));
}

}  // namespace kiln::backends::gpu
