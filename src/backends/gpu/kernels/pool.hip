// 2-D max and average pooling (pool.hpp). Memory-bound: a thread owns one output pixel's V
// consecutive channels in channels-last storage (one 16-byte load per tap where the channels
// are a whole number of vectors: adjacent threads read adjacent vectors of one pixel), or one
// output element in row-major storage (adjacent threads take adjacent output columns). The
// count of an average is separable: the taps inside along H times those inside along W.
#include <cfloat>
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/pool.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T, int V>
struct alignas(sizeof(T) * V) PoolVec {
  T v[V];
};

// The value a window of padding alone gives, as the reference kernel's lowest(): -inf for the
// 16-bit types, -FLT_MAX for float32.
template <typename T>
__device__ inline float lowest_value() {
  return sizeof(T) == 4 ? -FLT_MAX : -INFINITY;
}

// Taps of one dim: the first and end tap indices inside [0, size) (positions grow with the tap,
// so the taps inside are one run), and how many lie inside the padded extent
// [-pad_begin, size + pad_end).
struct TapRange {
  int first, end, padded;
};
__device__ inline TapRange tap_range(int64_t start, int taps, int dil, int64_t size, int pad_begin,
                                     int pad_end) {
  TapRange t{0, 0, 0};
  bool seen = false;
  for (int k = 0; k < taps; ++k) {
    const int64_t p = start + int64_t{k} * dil;
    if (p >= -pad_begin && p < size + pad_end) ++t.padded;
    if (p >= 0 && p < size) {
      if (!seen) t.first = k, seen = true;
      t.end = k + 1;
    }
  }
  return t;
}

// V channels (channels-last) or one element (row-major, V = 1) of output `o`. `x_at(ih, iw)`
// gives the address of the first of the V inputs at that pixel.
template <typename T, int V, typename At>
__device__ inline void pool_one(const PoolArgs& a, int64_t oh_i, int64_t ow_i, At x_at, T* out) {
  const int64_t h0 = oh_i * a.stride_h - a.pad_top, w0 = ow_i * a.stride_w - a.pad_left;
  const TapRange rh = tap_range(h0, a.kh, a.dil_h, a.h, a.pad_top, a.pad_bottom);
  const TapRange rw = tap_range(w0, a.kw, a.dil_w, a.w, a.pad_left, a.pad_right);
  float acc[V];
  bool any = false;
  KILN_UNROLL
  for (int e = 0; e < V; ++e) acc[e] = a.max ? lowest_value<T>() : 0.f;
  for (int r = rh.first; r < rh.end; ++r) {
    const int64_t ih = h0 + int64_t{r} * a.dil_h;
    for (int s = rw.first; s < rw.end; ++s) {
      const int64_t iw = w0 + int64_t{s} * a.dil_w;
      const PoolVec<T, V> v = *reinterpret_cast<const PoolVec<T, V>*>(x_at(ih, iw));
      KILN_UNROLL
      for (int e = 0; e < V; ++e) {
        const float f = to_float(v.v[e]);
        if (!a.max) {
          acc[e] += f;
        } else if (!any || f > acc[e]) {
          acc[e] = f;
        }
      }
      any = true;
    }
  }
  if (!a.max) {
    const int count =
        a.count_include_pad ? rh.padded * rw.padded : (rh.end - rh.first) * (rw.end - rw.first);
    KILN_UNROLL
    for (int e = 0; e < V; ++e) acc[e] = count > 0 ? acc[e] / static_cast<float>(count) : 0.f;
  }
  PoolVec<T, V> o;
  KILN_UNROLL
  for (int e = 0; e < V; ++e) o.v[e] = from_float<T>(acc[e]);
  *reinterpret_cast<PoolVec<T, V>*>(out) = o;
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) pool_nhwc(PoolArgs a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t groups = a.c / V;
  const int64_t total = a.n * a.oh * a.ow * groups;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t g = i % groups, pixel = i / groups;
    const int64_t ow_i = pixel % a.ow, rest = pixel / a.ow;
    const int64_t oh_i = rest % a.oh, img = rest / a.oh;
    const T* plane = x + img * a.h * a.w * a.c + g * V;
    pool_one<T, V>(
        a, oh_i, ow_i, [&](int64_t ih, int64_t iw) { return plane + (ih * a.w + iw) * a.c; },
        y + pixel * a.c + g * V);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) pool_nchw(PoolArgs a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t total = a.n * a.c * a.oh * a.ow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t ow_i = i % a.ow, rest = i / a.ow;
    const int64_t oh_i = rest % a.oh, plane_i = rest / a.oh;
    const T* plane = x + plane_i * a.h * a.w;
    pool_one<T, 1>(
        a, oh_i, ow_i, [&](int64_t ih, int64_t iw) { return plane + ih * a.w + iw; }, y + i);
  }
}

template <typename T>
hipError_t launch_typed(const PoolArgs& a, hipStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = a.channels_last && a.c % kVec == 0 &&
                   reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  const int64_t work = a.n * a.oh * a.ow * (vec ? a.c / kVec : a.c);
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8));
  if (!a.channels_last) {
    hipLaunchKernelGGL(pool_nchw<T>, grid, dim3(kThreads), 0, stream, a);
  } else if (vec) {
    hipLaunchKernelGGL((pool_nhwc<T, kVec>), grid, dim3(kThreads), 0, stream, a);
  } else {
    hipLaunchKernelGGL((pool_nhwc<T, 1>), grid, dim3(kThreads), 0, stream, a);
  }
  return hipGetLastError();
}

}  // namespace

hipError_t launch_pool(const PoolArgs& a, hipStream_t stream) {
  if (a.n < 0 || a.c < 0 || a.oh < 0 || a.ow < 0 || a.kh < 1 || a.kw < 1 || a.stride_h < 1 ||
      a.stride_w < 1 || a.dil_h < 1 || a.dil_w < 1) {
    return hipErrorInvalidValue;
  }
  if (a.n * a.c * a.oh * a.ow == 0) return hipSuccess;
  switch (a.type) {
    case FloatType::F32:
      return launch_typed<float>(a, stream);
    case FloatType::F16:
      return launch_typed<__half>(a, stream);
    case FloatType::BF16:
      return launch_typed<Bf16>(a, stream);
  }
  return hipErrorInvalidValue;
}

}  // namespace kiln::backends::gpu::kernels
