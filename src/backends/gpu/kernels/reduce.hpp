#pragma once
// Launcher of the reduction kernel (reduce.hip). Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

enum class ReduceOp { Sum, Mean, Max, Min };

// out[o] = reduce over r of x[kept offset of o + reduced offset of r], for `outputs` outputs
// (row-major over kept.dims) and `count` reduced elements (row-major over reduced.dims); the
// offsets come from operand 0 of each walk. Accumulated in float32; Max / Min keep a NaN.
hipError_t launch_reduce(ReduceOp op, FloatType type, const void* x, void* out, int64_t outputs,
                         const StridedShape& kept, int64_t count, const StridedShape& reduced,
                         hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
