// Element-wise kernels: grid-stride loops, the operation a functor over the op's point function
// (ops/point_ops.hpp, the formula the reference and the CPU compute), the element type a
// template (fp16 and bf16 computed in fp32, rounded once). Binary ops broadcast numpy-style
// through a StridedShape; same-shape operands take the plain indexed loop.
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/elementwise.hpp"
#include "ops/point_chain.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

// The op is a constant here, so the step's switch folds away: each instantiation is its formula.
template <UnaryOp Op>
struct Unary {
  float alpha, beta;
  __device__ float operator()(float x) const {
    return point::apply_point_step<float>(point::PointStep{Op, 0, false, alpha, beta}, x, 0.f);
  }
};

template <BinaryOp Op>
struct Binary {
  __device__ float operator()(float a, float b) const {
    if constexpr (Op == BinaryOp::Add) return point::add(a, b);
    if constexpr (Op == BinaryOp::Sub) return point::sub(a, b);
    if constexpr (Op == BinaryOp::Mul) return point::mul(a, b);
    if constexpr (Op == BinaryOp::Div) return point::div(a, b);
    if constexpr (Op == BinaryOp::Pow) return point::pow(a, b);
    if constexpr (Op == BinaryOp::Max) return point::maximum(a, b);
    if constexpr (Op == BinaryOp::Min) return point::minimum(a, b);
  }
};

// Each element is read before the output element of the same index is written, so y may be x.
// Vector: every pointer 16-byte aligned, a thread takes 16 bytes a step (the last thread of the
// first pass also the n % 16-byte tail); else one element a step.
template <typename T, bool Vector, typename F>
__global__ void unary_kernel(const T* x, T* y, int64_t n, F f) {
  if constexpr (Vector) {
    constexpr int V = Vec16<T>::kElems;
    const int64_t chunks = n / V;
    for (int64_t c = global_thread(); c < chunks; c += grid_threads()) {
      Vec16<T> v = reinterpret_cast<const Vec16<T>*>(x)[c];
      KILN_UNROLL
      for (int e = 0; e < V; ++e) v.v[e] = from_float<T>(f(to_float(v.v[e])));
      reinterpret_cast<Vec16<T>*>(y)[c] = v;
    }
    if (global_thread() == 0) {
      for (int64_t i = chunks * V; i < n; ++i) y[i] = from_float<T>(f(to_float(x[i])));
    }
  } else {
    for (int64_t i = global_thread(); i < n; i += grid_threads())
      y[i] = from_float<T>(f(to_float(x[i])));
  }
}

template <typename T, bool Vector, typename F>
__global__ void binary_kernel(const T* a, const T* b, T* y, int64_t n, F f) {
  if constexpr (Vector) {
    constexpr int V = Vec16<T>::kElems;
    const int64_t chunks = n / V;
    for (int64_t c = global_thread(); c < chunks; c += grid_threads()) {
      const Vec16<T> va = reinterpret_cast<const Vec16<T>*>(a)[c];
      const Vec16<T> vb = reinterpret_cast<const Vec16<T>*>(b)[c];
      Vec16<T> vy;
      KILN_UNROLL
      for (int e = 0; e < V; ++e) vy.v[e] = from_float<T>(f(to_float(va.v[e]), to_float(vb.v[e])));
      reinterpret_cast<Vec16<T>*>(y)[c] = vy;
    }
    if (global_thread() == 0) {
      for (int64_t i = chunks * V; i < n; ++i)
        y[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
    }
  } else {
    for (int64_t i = global_thread(); i < n; i += grid_threads())
      y[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
  }
}

// y is row-major over s.dims; a and b are read through s.strides[0] and [1].
template <typename T, typename Index, typename F>
__global__ void broadcast_kernel(const T* a, const T* b, T* y, Index n, StridedShape s, F f) {
  const Index stride = static_cast<Index>(grid_threads());
  for (Index i = static_cast<Index>(global_thread()); i < n; i += stride) {
    Index off[2];
    strided_offsets<Index, 2>(s, i, off);
    y[i] = from_float<T>(f(to_float(a[off[0]]), to_float(b[off[1]])));
  }
}

template <typename T, typename F>
hipError_t unary(const void* x, void* y, int64_t n, F f, hipStream_t stream) {
  // Through a pointer: the macro would split the template's argument list at its comma.
  if (aligned16(x) && aligned16(y)) {
    auto* kernel = &unary_kernel<T, true, F>;
    hipLaunchKernelGGL(kernel, grid_for(n / Vec16<T>::kElems), dim3(kBlock), 0, stream,
                       static_cast<const T*>(x), static_cast<T*>(y), n, f);
  } else {
    auto* kernel = &unary_kernel<T, false, F>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, static_cast<const T*>(x),
                       static_cast<T*>(y), n, f);
  }
  return hipGetLastError();
}

template <typename T, typename F>
hipError_t binary(const void* a, const void* b, void* y, int64_t n, const StridedShape* shape,
                  hipStream_t stream) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* py = static_cast<T*>(y);
  if (!shape && aligned16(a) && aligned16(b) && aligned16(y)) {
    auto* kernel = &binary_kernel<T, true, F>;
    hipLaunchKernelGGL(kernel, grid_for(n / Vec16<T>::kElems), dim3(kBlock), 0, stream, pa, pb, py,
                       n, F{});
  } else if (!shape) {
    auto* kernel = &binary_kernel<T, false, F>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, pa, pb, py, n, F{});
  } else if (n <= INT_MAX) {
    // Input offsets are below their operand's element count, which is at most n.
    auto* kernel = &broadcast_kernel<T, int32_t, F>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, pa, pb, py,
                       static_cast<int32_t>(n), *shape, F{});
  } else {
    auto* kernel = &broadcast_kernel<T, int64_t, F>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, pa, pb, py, n, *shape, F{});
  }
  return hipGetLastError();
}

template <typename T>
hipError_t unary_typed(const UnaryParams& p, const void* x, void* y, int64_t n, hipStream_t s) {
#define KILN_UNARY_CASE(OP) \
  case UnaryOp::OP:         \
    return unary<T>(x, y, n, Unary<UnaryOp::OP>{p.alpha, p.beta}, s);
  switch (p.op) {
    KILN_UNARY_CASE(Relu)
    KILN_UNARY_CASE(Neg)
    KILN_UNARY_CASE(Abs)
    KILN_UNARY_CASE(Exp)
    KILN_UNARY_CASE(Log)
    KILN_UNARY_CASE(Sqrt)
    KILN_UNARY_CASE(Reciprocal)
    KILN_UNARY_CASE(Tanh)
    KILN_UNARY_CASE(Sigmoid)
    KILN_UNARY_CASE(Erf)
    KILN_UNARY_CASE(Sign)
    KILN_UNARY_CASE(Softplus)
    KILN_UNARY_CASE(Softsign)
    KILN_UNARY_CASE(Elu)
    KILN_UNARY_CASE(Selu)
    KILN_UNARY_CASE(Celu)
    KILN_UNARY_CASE(LeakyRelu)
    KILN_UNARY_CASE(HardSigmoid)
    KILN_UNARY_CASE(HardSwish)
    KILN_UNARY_CASE(Mish)
    KILN_UNARY_CASE(ThresholdedRelu)
    KILN_UNARY_CASE(Clip)
    KILN_UNARY_CASE(GeluErf)
    KILN_UNARY_CASE(GeluTanh)
    KILN_UNARY_CASE(Silu)
    default:  // a binary op
      break;
  }
#undef KILN_UNARY_CASE
  return hipErrorInvalidValue;
}

template <typename T>
hipError_t binary_typed(BinaryOp op, const void* a, const void* b, void* y, int64_t n,
                        const StridedShape* shape, hipStream_t s) {
  switch (op) {
    case BinaryOp::Add:
      return binary<T, Binary<BinaryOp::Add>>(a, b, y, n, shape, s);
    case BinaryOp::Sub:
      return binary<T, Binary<BinaryOp::Sub>>(a, b, y, n, shape, s);
    case BinaryOp::Mul:
      return binary<T, Binary<BinaryOp::Mul>>(a, b, y, n, shape, s);
    case BinaryOp::Div:
      return binary<T, Binary<BinaryOp::Div>>(a, b, y, n, shape, s);
    case BinaryOp::Pow:
      return binary<T, Binary<BinaryOp::Pow>>(a, b, y, n, shape, s);
    case BinaryOp::Max:
      return binary<T, Binary<BinaryOp::Max>>(a, b, y, n, shape, s);
    case BinaryOp::Min:
      return binary<T, Binary<BinaryOp::Min>>(a, b, y, n, shape, s);
  }
  return hipErrorInvalidValue;
}

}  // namespace

hipError_t launch_unary(const UnaryParams& op, FloatType type, const void* x, void* y, int64_t n,
                        hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() { return unary_typed<T>(op, x, y, n, stream); });
}

hipError_t launch_binary(BinaryOp op, FloatType type, const void* a, const void* b, void* y,
                         int64_t n, const StridedShape* shape, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_float(
      type, [&]<typename T>() { return binary_typed<T>(op, a, b, y, n, shape, stream); });
}

}  // namespace kiln::backends::gpu::kernels
