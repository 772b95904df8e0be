#pragma once
// Launchers of the logic kernels (logic.hip): float tests with a bool result (IsNaN, IsInf) and
// bool algebra (Not, And, Or, Xor, with numpy broadcasting). Bools are one byte, 0 or 1, as in
// ONNX tensors. Plain declarations: the runtime side (g++ on NVIDIA) includes this.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

enum class FloatTest { IsNaN, IsPosInf, IsNegInf, IsInf };
enum class BoolOp { And, Or, Xor };

// y[i] = test(x[i]) for n elements of `type`.
hipError_t launch_float_test(FloatTest test, FloatType type, const void* x, bool* y, int64_t n,
                             hipStream_t stream);
// y[i] = !x[i].
hipError_t launch_not(const bool* x, bool* y, int64_t n, hipStream_t stream);
// y = op(a, b) over n output elements; `shape` as launch_binary's (elementwise.hpp).
hipError_t launch_bool_binary(BoolOp op, const bool* a, const bool* b, bool* y, int64_t n,
                              const StridedShape* shape, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
