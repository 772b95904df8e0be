#pragma once
// Launcher of ai.kiln PointChain (point_chain.hip): element-wise steps (ops/point_chain.hpp) on
// each element in float32, rounded once to the element type. Plain declarations: the runtime
// side (g++ on NVIDIA) includes this.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"
#include "ops/point_chain.hpp"

namespace kiln::backends::gpu::kernels {

struct PointProgram {
  int steps = 0;
  point::PointStep step[point::kMaxPointSteps];
  int inputs = 1;
  const void* input[point::kMaxPointInputs] = {};
};

// y[i] for n elements of `type`. `shape` null: every input is y's shape (in any layout they all
// share) and is read at index i; else y is row-major over shape->dims and input k is read
// through shape->strides[k].
hipError_t launch_point_chain(FloatType type, const PointProgram& program, void* y, int64_t n,
                              const StridedShape* shape, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
