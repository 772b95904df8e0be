#pragma once
// Type-agnostic tensor slicing and joining used by control flow and sequence ops: they move
// elements of any type (strings included) without looking at them.
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops::ctl {

// Copies `count` elements from src[src_off..] to dst[dst_off..]; both tensors share a dtype.
void copy_elements(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off, int64_t count);
// Elements [start, start + len) along `axis`, keeping the axis.
Tensor slice_axis(const Tensor& t, int64_t axis, int64_t start, int64_t len);
// Element `index` along `axis`, dropping the axis.
Tensor take_axis(const Tensor& t, int64_t axis, int64_t index);
// Joins tensors along an existing axis; every other dim must agree.
Tensor concat_axis(const AttrReader& ctx, const std::vector<Tensor>& parts, int64_t axis);
// Joins equally shaped tensors along a new axis inserted at `axis`.
Tensor stack_axis(const AttrReader& ctx, const std::vector<Tensor>& parts, int64_t axis);
// Reads a scalar (or single element) tensor as bool / int64.
bool scalar_bool(const AttrReader& ctx, const Tensor& t, const char* what);
int64_t scalar_int(const AttrReader& ctx, const Tensor& t, const char* what);

}  // namespace kiln::ops::ctl
