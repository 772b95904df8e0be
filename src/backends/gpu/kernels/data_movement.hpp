#pragma once
// Launchers of the kernels that move elements without arithmetic (data_movement.hip): a
// strided copy (Transpose, Slice, Expand, each input of a Concat), Gather and Where. They
// work on element sizes (1, 2, 4 or 8 bytes), so every element type of those sizes is served.
// Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// For each row-major index over shape.dims: dst[offset 1] = src[offset 0] (offsets from
// shape.strides[0] and [1], which may be negative: a Slice with negative steps). `span` bounds
// every |offset| and the element count (int32 index math below 2^31).
hipError_t launch_strided_copy(int elem_size, const void* src, void* dst, int64_t n,
                               const StridedShape& shape, int64_t span, hipStream_t stream);

// out[o, j, i] = data[o, indices[j], i] for data [outer, axis, inner] and `count` indices;
// a negative index counts from the end; one outside [-axis, axis) gives zeros (the launch
// cannot raise; the runtime side checks constant indices beforehand).
hipError_t launch_gather(int elem_size, const void* data, const void* indices, bool indices64,
                         void* out, int64_t outer, int64_t axis, int64_t inner, int64_t count,
                         hipStream_t stream);

// Where Split's pieces go: output k takes the positions [begin[k], begin[k + 1]) of the split
// axis. At most kMaxParts outputs in one launch (the runtime launches again for more).
struct SplitParts {
  static constexpr int kMaxParts = 8;
  void* dst[kMaxParts];
  int64_t begin[kMaxParts + 1];
  int count;
};

// Split of data [outer, axis, inner] along the middle dim into parts.count outputs, each
// [outer, begin[k + 1] - begin[k], inner], in one launch; the positions parts.begin[0] to
// parts.begin[count] of the axis are read (a later launch covers the next parts).
hipError_t launch_split(int elem_size, const void* data, int64_t outer, int64_t axis, int64_t inner,
                        const SplitParts& parts, hipStream_t stream);

// out = cond ? x : y over n row-major output elements; operands 0, 1, 2 of `shape` are cond
// (bool, one byte), x and y.
hipError_t launch_where(int elem_size, const void* cond, const void* x, const void* y, void* out,
                        int64_t n, const StridedShape& shape, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
