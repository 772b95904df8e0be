#pragma once
// Device helpers shared by the .hip kernel sources (device code only: included by .hip files,
// never by the runtime's .cpp files). Loads and stores of the float types in float32 (fp16 and
// bf16 are computed in fp32 and rounded once), wavefront and block reductions that work for
// any warpSize (32 on NVIDIA and RDNA, 64 on CDNA), and launch-size helpers.
#include <cmath>
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

// Loops over registers (a tile's accumulators, a thread's channels) must unroll, or the arrays
// spill to local memory; a pipeline's main loop must not (its stages are already in flight).
// The host emulation's compiler takes no such pragma.
#if defined(__CUDACC__) || defined(__HIP__)
#define KILN_UNROLL _Pragma("unroll")
#define KILN_NO_UNROLL _Pragma("unroll 1")
#else
#define KILN_UNROLL
#define KILN_NO_UNROLL
#endif

namespace kiln::backends::gpu::kernels {

// bfloat16 as its bits: both vendors have a bf16 type, but under different names and headers
// (and HIP 5.2's lacks device conversions on every target), and a bf16 value is just the top
// half of a float32.
struct Bf16 {
  uint16_t bits;
};

__device__ inline float to_float(float v) {
  return v;
}
__device__ inline float to_float(__half v) {
  return __half2float(v);
}
__device__ inline float to_float(Bf16 v) {
  return __uint_as_float(uint32_t(v.bits) << 16);
}

template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
// Round to nearest even, as the host's float_to_half_bits.
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half(v);
}
// Round to nearest even; NaN stays a quiet NaN (as core/half.hpp's float_to_bfloat16_bits).
template <>
__device__ inline Bf16 from_float<Bf16>(float v) {
  const uint32_t x = __float_as_uint(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<uint16_t>((x >> 16) | 0x40u)};
  return Bf16{static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

// The same value rounded to T and widened back: what storing and reloading it would give.
template <typename T>
__device__ inline float round_to(float v) {
  return to_float(from_float<T>(v));
}

// Calls f.template operator()<T>() with T the device type of `type`; returns its result.
template <typename F>
inline hipError_t dispatch_float(FloatType type, F&& f) {
  switch (type) {
    case FloatType::F32:
      return f.template operator()<float>();
    case FloatType::F16:
      return f.template operator()<__half>();
    case FloatType::BF16:
      return f.template operator()<Bf16>();
  }
  return hipErrorInvalidValue;
}

// ---- 16-byte vectors ----

// 16 bytes of T: what one vector load or store moves (8 float16 / bfloat16, 4 float32), for
// kernels whose operands are 16-byte aligned.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kElems = 16 / static_cast<int>(sizeof(T));
  T v[kElems];
};

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- reductions ----

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
// fmaxf would drop a NaN; a NaN must reach the result, as in the reference.
struct MaxOp {
  __device__ float operator()(float a, float b) const { return (a != a || a > b) ? a : b; }
};
struct MinOp {
  __device__ float operator()(float a, float b) const { return (a != a || a < b) ? a : b; }
};

// 2^x for probabilities that are rounded to float16 next (attention's P): NVIDIA's hardware
// approximation (2 ulp, results below 2^-126 flushed to 0), where exp2f adds range fix-ups
// around it. exp2f elsewhere. ex2(-inf) = 0 and ex2(NaN) = NaN, as exp2f.
__device__ inline float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// Every lane of the wavefront gets the reduction of all lanes' values (butterfly).
template <typename Op>
__device__ inline float warp_all_reduce(float v, Op op) {
  for (int mask = KILN_WARP_SIZE / 2; mask > 0; mask /= 2) v = op(v, __shfl_xor(v, mask));
  return v;
}

// Every thread of the block gets the reduction of all threads' values. `scratch` holds at
// least blockDim.x / KILN_WARP_SIZE floats of shared memory; blockDim.x is a multiple of the
// wavefront size. Holds a barrier: every thread of the block must call it.
template <typename Op>
__device__ inline float block_all_reduce(float v, Op op, float* scratch) {
  const int lane = threadIdx.x % KILN_WARP_SIZE;
  const int warp = threadIdx.x / KILN_WARP_SIZE;
  const int warps = blockDim.x / KILN_WARP_SIZE;
  v = warp_all_reduce(v, op);
  if (warps == 1) return v;
  __syncthreads();  // an earlier call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < warps; ++w) r = op(r, scratch[w]);
  return r;
}

// ---- elements moved as words ----

// The unsigned word of Size bytes: kernels that only move elements (copies, gathers, nearest
// resizing) take one instantiation per size for every dtype of that size.
template <int Size>
struct Word;
template <>
struct Word<1> {
  using type = uint8_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = uint64_t;
};

// Calls f.template operator()<W>() with W the unsigned word of `size` bytes.
template <typename F>
hipError_t dispatch_size(int size, F&& f) {
  switch (size) {
    case 1:
      return f.template operator()<Word<1>::type>();
    case 2:
      return f.template operator()<Word<2>::type>();
    case 4:
      return f.template operator()<Word<4>::type>();
    case 8:
      return f.template operator()<Word<8>::type>();
  }
  return hipErrorInvalidValue;
}

// ---- launch sizes ----

constexpr int kBlock = 256;

// Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
inline dim3 grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  return dim3(static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535));
}

// Index of this thread in a 1-D grid and the grid's thread count, as int64 (sizes may pass
// 2^31 elements).
__device__ inline int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Offsets of the first Operands operands for the row-major index `i` over s.dims (Index: int32 when
// every offset fits, so the divisions are the cheap ones).
template <typename Index, int Operands>
__device__ inline void strided_offsets(const StridedShape& s, Index i, Index (&off)[Operands]) {
  for (int k = 0; k < Operands; ++k) off[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const Index extent = static_cast<Index>(s.dims[d]);
    const Index idx = i % extent;
    i /= extent;
    for (int k = 0; k < Operands; ++k) off[k] += idx * static_cast<Index>(s.strides[k][d]);
  }
}

}  // namespace kiln::backends::gpu::kernels
