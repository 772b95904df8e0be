// Resize: one thread per output element, in the output's storage order. The dims that are not
// resized add their index times the input's stride; each resized dim contributes its taps, and
// an interpolated element sums the product of every resized dim's taps (2 x 2 for bilinear,
// 4 x 4 for bicubic), in float32.
#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/resize.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

// What an output element reads: the offset its untouched dims give, and for each resized dim
// (in walk order) the first of its taps and the input's stride along it.
struct Taps {
  int64_t base = 0;
  int count = 0;  // resized dims
  bool extrapolate = false;
  const int32_t* index[kMaxDims];
  const float* weight[kMaxDims];
  int taps[kMaxDims];
  int64_t stride[kMaxDims];
};

__device__ inline Taps taps_of(const ResizeWalk& w, int64_t i) {
  Taps t;
  for (int d = w.rank - 1; d >= 0; --d) {
    const int64_t extent = w.out_dims[d];
    const int64_t q = i % extent;
    i /= extent;
    const ResizeDim& r = w.dims[d];
    if (r.taps == 0) {
      t.base += q * w.in_strides[d];
      continue;
    }
    const int32_t* index = r.index + q * r.taps;
    if (index[0] < 0) t.extrapolate = true;
    t.index[t.count] = index;
    t.weight[t.count] = r.weight ? r.weight + q * r.taps : nullptr;
    t.taps[t.count] = r.taps;
    t.stride[t.count] = w.in_strides[d];
    ++t.count;
  }
  return t;
}

template <typename W>
__global__ void resize_nearest_kernel(const W* x, W* y, int64_t n, ResizeWalk walk, W fill) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const Taps t = taps_of(walk, i);
    if (t.extrapolate) {
      y[i] = fill;
      continue;
    }
    int64_t at = t.base;
    for (int k = 0; k < t.count; ++k) at += t.index[k][0] * t.stride[k];
    y[i] = x[at];
  }
}

template <typename T>
__global__ void resize_interpolate_kernel(const T* x, T* y, int64_t n, ResizeWalk walk,
                                          float fill) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const Taps t = taps_of(walk, i);
    if (t.extrapolate) {
      y[i] = from_float<T>(fill);
      continue;
    }
    // An odometer over the resized dims' taps: the last dim's taps turn fastest.
    int tap[kMaxDims] = {};
    float sum = 0.f;
    for (;;) {
      int64_t at = t.base;
      float weight = 1.f;
      for (int k = 0; k < t.count; ++k) {
        at += t.index[k][tap[k]] * t.stride[k];
        weight *= t.weight[k][tap[k]];
      }
      if (weight != 0.f) sum += weight * to_float(x[at]);
      int k = t.count - 1;
      while (k >= 0 && ++tap[k] == t.taps[k]) tap[k--] = 0;
      if (k < 0) break;
    }
    y[i] = from_float<T>(sum);
  }
}

}  // namespace

hipError_t launch_resize_nearest(int elem_size, const void* x, void* y, int64_t n,
                                 const ResizeWalk& walk, uint64_t fill, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_size(elem_size, [&]<typename W>() {
    hipLaunchKernelGGL(resize_nearest_kernel<W>, grid_for(n), dim3(kBlock), 0, stream,
                       static_cast<const W*>(x), static_cast<W*>(y), n, walk, static_cast<W>(fill));
    return hipGetLastError();
  });
}

hipError_t launch_resize_interpolate(FloatType type, const void* x, void* y, int64_t n,
                                     const ResizeWalk& walk, float fill, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() {
    hipLaunchKernelGGL(resize_interpolate_kernel<T>, grid_for(n), dim3(kBlock), 0, stream,
                       static_cast<const T*>(x), static_cast<T*>(y), n, walk, fill);
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
