// Logic kernels: grid-stride loops like the element-wise ones (elementwise.hip), with bool
// results. A float test reads the value in fp32 (fp16 and bf16 NaNs and infinities stay what
// they are when widened).
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/logic.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

template <FloatTest Test>
__device__ bool float_test(float v) {
  if constexpr (Test == FloatTest::IsNaN) return v != v;
  if constexpr (Test == FloatTest::IsPosInf) return v == INFINITY;
  if constexpr (Test == FloatTest::IsNegInf) return v == -INFINITY;
  if constexpr (Test == FloatTest::IsInf) return v == INFINITY || v == -INFINITY;
}

template <BoolOp Op>
__device__ bool bool_op(bool a, bool b) {
  if constexpr (Op == BoolOp::And) return a && b;
  if constexpr (Op == BoolOp::Or) return a || b;
  if constexpr (Op == BoolOp::Xor) return a != b;
}

template <typename T, FloatTest Test>
__global__ void float_test_kernel(const T* x, bool* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] = float_test<Test>(to_float(x[i]));
}

__global__ void not_kernel(const bool* x, bool* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = !x[i];
}

template <BoolOp Op>
__global__ void bool_binary_kernel(const bool* a, const bool* b, bool* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = bool_op<Op>(a[i], b[i]);
}

template <BoolOp Op, typename Index>
__global__ void bool_broadcast_kernel(const bool* a, const bool* b, bool* y, Index n,
                                      StridedShape s) {
  const Index stride = static_cast<Index>(grid_threads());
  for (Index i = static_cast<Index>(global_thread()); i < n; i += stride) {
    Index off[2];
    strided_offsets<Index, 2>(s, i, off);
    y[i] = bool_op<Op>(a[off[0]], b[off[1]]);
  }
}

template <typename T, FloatTest Test>
hipError_t float_test_launch(const void* x, bool* y, int64_t n, hipStream_t s) {
  // Through a pointer: the macro would split the template's argument list at its comma.
  auto* kernel = &float_test_kernel<T, Test>;
  hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, s, static_cast<const T*>(x), y, n);
  return hipGetLastError();
}

template <typename T>
hipError_t float_test_typed(FloatTest test, const void* x, bool* y, int64_t n, hipStream_t s) {
  switch (test) {
    case FloatTest::IsNaN:
      return float_test_launch<T, FloatTest::IsNaN>(x, y, n, s);
    case FloatTest::IsPosInf:
      return float_test_launch<T, FloatTest::IsPosInf>(x, y, n, s);
    case FloatTest::IsNegInf:
      return float_test_launch<T, FloatTest::IsNegInf>(x, y, n, s);
    case FloatTest::IsInf:
      return float_test_launch<T, FloatTest::IsInf>(x, y, n, s);
  }
  return hipErrorInvalidValue;
}

template <BoolOp Op>
hipError_t bool_binary(const bool* a, const bool* b, bool* y, int64_t n, const StridedShape* shape,
                       hipStream_t s) {
  if (!shape) {
    auto* kernel = &bool_binary_kernel<Op>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, s, a, b, y, n);
  } else if (n <= INT_MAX) {
    auto* kernel = &bool_broadcast_kernel<Op, int32_t>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, s, a, b, y, static_cast<int32_t>(n),
                       *shape);
  } else {
    auto* kernel = &bool_broadcast_kernel<Op, int64_t>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, s, a, b, y, n, *shape);
  }
  return hipGetLastError();
}

}  // namespace

hipError_t launch_float_test(FloatTest test, FloatType type, const void* x, bool* y, int64_t n,
                             hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_float(type,
                        [&]<typename T>() { return float_test_typed<T>(test, x, y, n, stream); });
}

hipError_t launch_not(const bool* x, bool* y, int64_t n, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  hipLaunchKernelGGL(not_kernel, grid_for(n), dim3(kBlock), 0, stream, x, y, n);
  return hipGetLastError();
}

hipError_t launch_bool_binary(BoolOp op, const bool* a, const bool* b, bool* y, int64_t n,
                              const StridedShape* shape, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  switch (op) {
    case BoolOp::And:
      return bool_binary<BoolOp::And>(a, b, y, n, shape, stream);
    case BoolOp::Or:
      return bool_binary<BoolOp::Or>(a, b, y, n, shape, stream);
    case BoolOp::Xor:
      return bool_binary<BoolOp::Xor>(a, b, y, n, shape, stream);
  }
  return hipErrorInvalidValue;
}

}  // namespace kiln::backends::gpu::kernels
