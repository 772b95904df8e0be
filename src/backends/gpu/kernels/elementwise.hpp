#pragma once
// Launchers of the element-wise kernels (elementwise.hip). Plain declarations: the runtime side,
// which g++ compiles on NVIDIA, includes this; only the .hip file holds device code. Every op's
// math is its point function (ops/point_ops.hpp) in fp32; fp16 and bf16 round once on store.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"
#include "ops/point_chain.hpp"

namespace kiln::backends::gpu::kernels {

// The unary ops are the point chains' (ops/point_chain.hpp): one list of ops and formulas for the
// single kernels, the chains and the reference. A binary PointOp is refused by launch_unary.
using UnaryOp = point::PointOp;

struct UnaryParams {
  UnaryOp op = UnaryOp::Relu;
  float alpha = 0.f;
  float beta = 0.f;
};

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max, Min };

// y[i] = op(x[i]) for n elements. Returns the launch status (hipSuccess, or the runtime's
// error for the caller to raise).
hipError_t launch_unary(const UnaryParams& op, FloatType type, const void* x, void* y, int64_t n,
                        hipStream_t stream);

// y = op(a, b) over n output elements. `shape` null: a, b and y have one shape (any layout, as
// long as all share it); else y is row-major over shape->dims and operand k of the walk is
// input k (broadcast strides).
hipError_t launch_binary(BinaryOp op, FloatType type, const void* a, const void* b, void* y,
                         int64_t n, const StridedShape* shape, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
