#pragma once
// What the CPU's data-movement kernels (Slice, Expand, Tile, Split, Gather, GatherElements, Pad,
// Reduce*, Resize) check and read of their inputs: the data input they take, whether an optional
// input was given, and int32 / int64 index inputs (starts, shape, sizes, indices, axes) as int64
// values.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "ir/graph.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {

// "" when input 0 is a tensor of anything but strings (which these kernels copy as bytes).
inline std::string check_data_input(const ir::Node& node) {
  const ir::Value* x = node.inputs().empty() ? nullptr : node.input(0);
  if (!x || x->type().kind != TypeInfo::Kind::Tensor) return "input is not a tensor";
  if (x->type().dtype == DataType::String) return "string tensors";
  return "";
}

// Whether optional input `slot` was given.
inline bool given(std::span<const DeviceTensor> in, size_t slot) {
  return slot < in.size() && in[slot].defined();
}

// An int32 / int64 index input as int64 values, refused naming `what` when it has another type.
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

// Indices into an axis of `dim` elements, negative ones wrapped, every one checked first.
inline std::vector<int64_t> checked_indices(const ops::AttrReader& attrs, const DeviceTensor& t,
                                            int64_t dim) {
  std::vector<int64_t> idx = index_values(attrs, t, "indices");
  for (int64_t& i : idx) {
    attrs.check(i >= -dim && i < dim, "index {} is out of range for a dimension of size {}", i,
                dim);
    if (i < 0) i += dim;
  }
  return idx;
}

}  // namespace kiln::backends::cpu
