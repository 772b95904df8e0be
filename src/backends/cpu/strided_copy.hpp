#pragma once
// The CPU's one strided copy, behind the data-movement kernels that only rearrange elements
// (Transpose, Slice, Split, Expand): the output is written in row-major order while the source
// is walked by one stride per output dim (any sign, 0 to repeat an element), from a base. Dims
// of size 1 are dropped and dims that are consecutive in the source too are merged; a
// contiguous innermost run is one memcpy, otherwise a gather with its stride. Rows are split
// over the threads in tasks of about 16k elements.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::backends::cpu {

// One output dim as the copy walks it: its size and its stride in the source (in elements).
struct StridedAxis {
  int64_t size, in_stride;
};

// Copies prod(axes' sizes) elements of `element_size` bytes into `dst`, row-major over `axes`
// (outermost first), reading src_base + sum(index_k * in_stride_k) elements.
void strided_copy(const void* src_base, const std::vector<StridedAxis>& axes, size_t element_size,
                  void* dst);

}  // namespace kiln::backends::cpu
