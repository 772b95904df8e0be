#pragma once
// Launcher of the Cast kernel (cast.hip). Plain declarations.
#include <cstdint>

#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

enum class CastType { F32, F16, BF16, I32, I64, Bool };

// dst[i] = src[i] converted, for n elements: floats to floats round to nearest even (once:
// fp16 <-> bf16 go through an exact float32); floats to integers truncate toward zero (the
// device saturates out-of-range values and gives 0 for NaN, where C++ leaves it undefined);
// integers to floats round through float32; anything to bool is `!= 0`; bool is 0 or 1.
hipError_t launch_cast(CastType from, CastType to, const void* src, void* dst, int64_t n,
                       hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
