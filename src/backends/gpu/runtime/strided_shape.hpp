#pragma once
// Host-side construction of kernels::StridedShape: numpy broadcasting of operands onto an
// output, and merging of dims every operand walks contiguously (so most walks end up rank 1 or
// 2 and the kernels divide less).
#include <cstdint>
#include <vector>

#include "backends/gpu/kernels/kernel_types.hpp"

namespace kiln::backends::gpu {

// Row-major element strides of `dims`.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);

// The numpy broadcast of `shapes`; false when they do not broadcast.
bool broadcast_dims(const std::vector<std::vector<int64_t>>& shapes, std::vector<int64_t>& out);

// Strides of an operand of `dims` read over the broadcast output `out` (right-aligned; 0 where
// the operand has extent 1 or lacks the dim).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& out);

// A walk over `dims` with the given per-operand strides, dims of extent 1 dropped and
// neighbours every operand walks contiguously merged. Throws Unsupported past kMaxDims.
kernels::StridedShape make_strided_shape(const std::vector<int64_t>& dims,
                                         const std::vector<std::vector<int64_t>>& strides,
                                         const char* what);

// Whether `param`, leading 1s dropped, equals the last dims of `dims`: then its element for
// the row-major index i of `dims` is i % numel(param).
bool is_suffix_of(const std::vector<int64_t>& param, const std::vector<int64_t>& dims);

}  // namespace kiln::backends::gpu
