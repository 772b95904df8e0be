#pragma once
// One strided copy on the GPU (kernels::launch_strided_copy with its walk built): the data
// movement kernels' Transpose / Slice / Expand / Concat, and the layout changes other kernels
// make through scratch (the depthwise convolution's channels-last operands).
#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/gpu/vendor.hpp"
#include "core/dtype.hpp"

namespace kiln::backends::gpu {

// Copies src (of src_numel elements) into dst (of dst_numel) over `dims`, reading and writing
// through the given element strides; `kernel` names the caller in errors.
void strided_copy(std::string_view kernel, DataType dtype, const void* src, int64_t src_numel,
                  void* dst, int64_t dst_numel, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& src_strides, const std::vector<int64_t>& dst_strides,
                  hipStream_t stream);

}  // namespace kiln::backends::gpu
