#pragma once
// An int32 / int64 index input of a CPU kernel (Slice's starts, Expand's shape, Split's sizes,
// Gather's indices) as int64 values, refused naming `what` when it has another type.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {

inline std::vector<int64_t> index_values(const ops::AttrReader& attrs, const DeviceTensor& t,
                                         const char* what) {
  const int64_t n = t.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (t.dtype == DataType::Int64) {
    const auto* p = static_cast<const int64_t*>(t.data);
    std::copy(p, p + n, out.begin());
  } else {
    attrs.check(t.dtype == DataType::Int32, "{} must be int32 or int64, not {}", what,
                dtype_name(t.dtype));
    const auto* p = static_cast<const int32_t*>(t.data);
    std::copy(p, p + n, out.begin());
  }
  return out;
}

}  // namespace kiln::backends::cpu
