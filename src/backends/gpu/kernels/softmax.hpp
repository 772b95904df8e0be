#pragma once
// Launcher of the Softmax / LogSoftmax kernels (softmax.hip). Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// x and y are [outer, axis, inner] row-major; the softmax runs along `axis` (inner == 1: rows
// of contiguous elements, the fast path). log: LogSoftmax. y may be x.
hipError_t launch_softmax(FloatType type, const void* x, void* y, int64_t outer, int64_t axis,
                          int64_t inner, bool log, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
