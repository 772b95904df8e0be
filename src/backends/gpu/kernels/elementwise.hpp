#pragma once
// Launchers of the element-wise kernels (elementwise.hip). Plain declarations: the runtime side,
// which g++ compiles on NVIDIA, includes this; only the .hip file holds device code.
#include <cstdint>

#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

enum class ElemType { F32, F16 };
enum class UnaryOp { Relu, Neg, Abs };
enum class BinaryOp { Add, Sub, Mul, Div };

// y[i] = op(x[i]) for n elements; fp16 is computed in fp32 and rounded once. Returns the launch
// status (hipSuccess, or the runtime's error for the caller to raise).
hipError_t launch_unary(UnaryOp op, ElemType type, const void* x, void* y, int64_t n,
                        hipStream_t stream);
// y[i] = op(a[i], b[i]): same shapes, no broadcast.
hipError_t launch_binary(BinaryOp op, ElemType type, const void* a, const void* b, void* y,
                         int64_t n, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
