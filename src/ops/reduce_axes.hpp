#pragma once
// Which axes a Reduce node reduces, from its attributes or its axes input: shared by the
// reference kernels (ops/reduce.cpp) and the CPU backend's (backends/cpu/reduce_kernel.cpp), so
// both read axes, keepdims and noop_with_empty_axes the same way.
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"

namespace kiln::ops {

// The opset from which the op reads axes from input 1 instead of the `axes` attribute.
inline int axes_input_since(const std::string& op_type) {
  return op_type == "ReduceSum" ? 13 : 18;
}

// Which axes a Reduce node reduces (none reduced: every output is its single input element).
struct ReduceAxes {
  std::vector<bool> reduced;
  bool keepdims = true;
};

inline ReduceAxes resolve_axes(const AttrReader& ctx, size_t rank, const std::vector<int64_t>& axes,
                               bool noop_with_empty_axes) {
  ReduceAxes r;
  r.keepdims = ctx.attr_int("keepdims", 1) != 0;
  r.reduced.assign(rank, axes.empty() && !noop_with_empty_axes);
  for (int64_t a : axes) {
    int64_t n = normalize_axis(ctx, a, static_cast<int64_t>(rank));
    if (rank == 0) continue;  // a scalar has nothing to reduce; axis 0/-1 is tolerated
    ctx.check(!r.reduced[static_cast<size_t>(n)], "axis {} is listed twice", a);
    r.reduced[static_cast<size_t>(n)] = true;
  }
  return r;
}

inline std::vector<int64_t> reduced_dims(const std::vector<int64_t>& dims, const ReduceAxes& r) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!r.reduced[i])
      out.push_back(dims[i]);
    else if (r.keepdims)
      out.push_back(1);
  }
  return out;
}

}  // namespace kiln::ops
