// Element-wise kernels, one grid-stride template per arity, the operation a functor. The first
// device code of the GPU backend: the same source built by nvcc (sm_80, sm_90) and hipcc (gfx908,
// gfx90a, gfx940, gfx1030) through vendor.hpp.
#include "backends/gpu/kernels/elementwise.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

constexpr int kBlock = 256;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__half* p, int64_t i, float v) { p[i] = __float2half(v); }

// NaN stays NaN, as in the reference kernel (numpy's maximum).
struct Relu {
  __device__ float operator()(float x) const { return x < 0.f ? 0.f : x; }
};
struct Neg {
  __device__ float operator()(float x) const { return -x; }
};
struct Abs {
  __device__ float operator()(float x) const { return fabsf(x); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct Div {
  __device__ float operator()(float a, float b) const { return a / b; }
};

template <typename T, typename F>
__global__ void unary_kernel(const T* x, T* y, int64_t n, F f) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    store(y, i, f(load(x, i)));
}

template <typename T, typename F>
__global__ void binary_kernel(const T* a, const T* b, T* y, int64_t n, F f) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    store(y, i, f(load(a, i), load(b, i)));
}

// Enough blocks to fill any current GPU several times over; the grid-stride loop does the rest.
dim3 grid_for(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  return dim3(static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
}

template <typename T, typename F>
hipError_t unary(const void* x, void* y, int64_t n, hipStream_t stream) {
  // Through a pointer: the macro would split the template's argument list at its comma.
  auto* kernel = &unary_kernel<T, F>;
  hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, static_cast<const T*>(x),
                     static_cast<T*>(y), n, F{});
  return hipGetLastError();
}

template <typename T, typename F>
hipError_t binary(const void* a, const void* b, void* y, int64_t n, hipStream_t stream) {
  auto* kernel = &binary_kernel<T, F>;
  hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, static_cast<const T*>(a),
                     static_cast<const T*>(b), static_cast<T*>(y), n, F{});
  return hipGetLastError();
}

template <typename T>
hipError_t unary_typed(UnaryOp op, const void* x, void* y, int64_t n, hipStream_t s) {
  switch (op) {
    case UnaryOp::Relu:
      return unary<T, Relu>(x, y, n, s);
    case UnaryOp::Neg:
      return unary<T, Neg>(x, y, n, s);
    case UnaryOp::Abs:
      return unary<T, Abs>(x, y, n, s);
  }
  return hipErrorInvalidValue;
}

template <typename T>
hipError_t binary_typed(BinaryOp op, const void* a, const void* b, void* y, int64_t n,
                        hipStream_t s) {
  switch (op) {
    case BinaryOp::Add:
      return binary<T, Add>(a, b, y, n, s);
    case BinaryOp::Sub:
      return binary<T, Sub>(a, b, y, n, s);
    case BinaryOp::Mul:
      return binary<T, Mul>(a, b, y, n, s);
    case BinaryOp::Div:
      return binary<T, Div>(a, b, y, n, s);
  }
  return hipErrorInvalidValue;
}

}  // namespace

hipError_t launch_unary(UnaryOp op, ElemType type, const void* x, void* y, int64_t n,
                        hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return type == ElemType::F32 ? unary_typed<float>(op, x, y, n, stream)
                               : unary_typed<__half>(op, x, y, n, stream);
}

hipError_t launch_binary(BinaryOp op, ElemType type, const void* a, const void* b, void* y,
                         int64_t n, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return type == ElemType::F32 ? binary_typed<float>(op, a, b, y, n, stream)
                               : binary_typed<__half>(op, a, b, y, n, stream);
}

}  // namespace kiln::backends::gpu::kernels
