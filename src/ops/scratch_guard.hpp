#pragma once
// Bounds the double-precision scratch buffers of reference kernels by the tensor size limit, so a
// malformed model (huge attribute, degenerate dims) fails cleanly instead of exhausting memory.
#include <vector>

#include "core/tensor.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::ops {

inline void check_scratch(const AttrReader& ctx, const std::vector<int64_t>& dims) {
  const int64_t n = shape_numel(dims);  // throws on negative dims and overflow
  ctx.check(static_cast<size_t>(n) <= Tensor::max_bytes() / sizeof(double),
            "intermediate of {} elements exceeds the tensor size limit", n);
}

}  // namespace kiln::ops
