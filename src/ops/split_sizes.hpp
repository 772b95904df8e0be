#pragma once
// How a Split cuts its axis (sizes checked, or equal parts), shared by the reference kernel
// (ops/slicing.cpp) and the CPU backend's (backends/cpu/split_kernel.cpp), so both cut the same
// way.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

// Equal parts. With num_outputs (opset 18) parts are ceil(dim / n) long and the tail takes what
// is left, which can be nothing when n > dim (as numpy slicing past the end gives).
inline std::vector<int64_t> split_equal(const AttrReader& ctx, int64_t dim, int64_t parts) {
  ctx.check(parts >= 1, "cannot split into {} parts", parts);
  if (dim % parts == 0) return std::vector<int64_t>(static_cast<size_t>(parts), dim / parts);
  ctx.check(ctx.has_attr("num_outputs"),
            "dimension {} does not split evenly into {} outputs and no sizes are given", dim,
            parts);
  const int64_t chunk = dim / parts + 1;
  std::vector<int64_t> sizes(static_cast<size_t>(parts));
  int64_t left = dim;
  for (int64_t& s : sizes) {
    s = std::min(chunk, left);
    left -= s;
  }
  return sizes;
}

inline int64_t split_part_count(const AttrReader& ctx, size_t outputs) {
  if (ctx.opset() >= 18 && ctx.has_attr("num_outputs")) {
    int64_t n = ctx.attr_int("num_outputs");
    ctx.check(n == static_cast<int64_t>(outputs), "num_outputs is {} but the node has {} outputs",
              n, outputs);
    return n;
  }
  return static_cast<int64_t>(outputs);
}

// Sizes a model gave: one per output, each fitting what is left of the axis, summing to it.
inline void check_split_sizes(const AttrReader& ctx, const std::vector<int64_t>& sizes,
                              size_t outputs, size_t axis, int64_t dim) {
  ctx.check(sizes.size() == outputs, "split has {} sizes for {} outputs", sizes.size(), outputs);
  int64_t sum = 0;
  for (int64_t s : sizes) {
    ctx.check(s >= 0 && s <= dim - sum, "split sizes {} do not fit axis {} of size {}",
              dims_to_string(sizes), axis, dim);
    sum += s;
  }
  ctx.check(sum == dim, "split sizes sum to {}, but axis {} has size {}", sum, axis, dim);
}

}  // namespace kiln::ops
