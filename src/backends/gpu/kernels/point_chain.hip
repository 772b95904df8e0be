// PointChain: one thread per element, the steps' point functions (ops/point_chain.hpp, the same
// formulas the reference computes in double) applied in float32 to the running value, operands
// read in place or through broadcast strides.
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/point_chain.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

static_assert(point::kMaxPointInputs <= kMaxOperands, "a walk carries every input's strides");

template <typename T, typename Index, bool Strided>
__global__ void point_chain_kernel(PointProgram p, T* y, Index n, StridedShape s) {
  const Index stride = static_cast<Index>(grid_threads());
  for (Index i = static_cast<Index>(global_thread()); i < n; i += stride) {
    Index off[point::kMaxPointInputs];
    if constexpr (Strided) {
      strided_offsets<Index, point::kMaxPointInputs>(s, i, off);
    } else {
      for (int k = 0; k < point::kMaxPointInputs; ++k) off[k] = i;
    }
    float v = to_float(static_cast<const T*>(p.input[0])[off[0]]);
    for (int k = 0; k < p.steps; ++k) {
      const point::PointStep& st = p.step[k];
      float operand = 0.f;
      if (point::is_binary(st.op)) {
        operand = st.operand == 0
                      ? v
                      : to_float(static_cast<const T*>(p.input[st.operand])[off[st.operand]]);
      }
      v = point::apply_point_step<float>(st, v, operand);
    }
    y[i] = from_float<T>(v);
  }
}

}  // namespace

hipError_t launch_point_chain(FloatType type, const PointProgram& program, void* y, int64_t n,
                              const StridedShape* shape, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  if (program.steps < 1 || program.steps > point::kMaxPointSteps || program.inputs < 1 ||
      program.inputs > point::kMaxPointInputs)
    return hipErrorInvalidValue;
  const StridedShape s = shape ? *shape : StridedShape{};
  return dispatch_float(type, [&]<typename T>() {
    T* py = static_cast<T*>(y);
    if (!shape) {
      auto* kernel = &point_chain_kernel<T, int64_t, false>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, program, py, n, s);
    } else if (n <= INT_MAX) {
      auto* kernel = &point_chain_kernel<T, int32_t, true>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, program, py,
                         static_cast<int32_t>(n), s);
    } else {
      auto* kernel = &point_chain_kernel<T, int64_t, true>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, program, py, n, s);
    }
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
