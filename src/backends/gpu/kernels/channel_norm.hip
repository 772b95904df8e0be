// Per-channel normalizations: one thread per element; its channel (and, for LRN, the stride
// between neighbouring channels) from the layout.
#include "backends/gpu/kernels/channel_norm.hpp"
#include "backends/gpu/kernels/device_common.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

__device__ inline int64_t channel_of(const ChannelShape& s, int64_t i) {
  return s.channels_last ? i % s.channels : (i / s.spatial) % s.channels;
}

template <typename T>
__global__ void batch_norm_kernel(const T* x, T* y, ChannelShape s, const float* ab) {
  const int64_t n = s.images * s.channels * s.spatial;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t c = channel_of(s, i);
    y[i] = from_float<T>(to_float(x[i]) * ab[c] + ab[s.channels + c]);
  }
}

template <typename T>
__global__ void lrn_kernel(const T* x, T* y, ChannelShape s, int size, float alpha, float beta,
                           float bias) {
  const int64_t n = s.images * s.channels * s.spatial;
  const int64_t step = s.channels_last ? 1 : s.spatial;  // between neighbouring channels
  const int before = (size - 1) / 2, after = size / 2;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t c = channel_of(s, i);
    const int64_t first = c - before < 0 ? 0 : c - before;
    const int64_t last = c + after >= s.channels ? s.channels - 1 : c + after;
    float sq = 0.f;
    for (int64_t j = first; j <= last; ++j) {
      const float v = to_float(x[i + (j - c) * step]);
      sq += v * v;
    }
    y[i] = from_float<T>(to_float(x[i]) / powf(bias + alpha / static_cast<float>(size) * sq, beta));
  }
}

}  // namespace

hipError_t launch_batch_norm(FloatType type, const void* x, void* y, const ChannelShape& s,
                             const float* ab, hipStream_t stream) {
  const int64_t n = s.images * s.channels * s.spatial;
  if (n <= 0) return hipSuccess;
  if (s.channels <= 0 || s.spatial <= 0 || !ab) return hipErrorInvalidValue;
  return dispatch_float(type, [&]<typename T>() {
    hipLaunchKernelGGL(batch_norm_kernel<T>, grid_for(n), dim3(kBlock), 0, stream,
                       static_cast<const T*>(x), static_cast<T*>(y), s, ab);
    return hipGetLastError();
  });
}

hipError_t launch_lrn(FloatType type, const void* x, void* y, const ChannelShape& s, int size,
                      float alpha, float beta, float bias, hipStream_t stream) {
  const int64_t n = s.images * s.channels * s.spatial;
  if (n <= 0) return hipSuccess;
  if (s.channels <= 0 || s.spatial <= 0 || size <= 0) return hipErrorInvalidValue;
  return dispatch_float(type, [&]<typename T>() {
    hipLaunchKernelGGL(lrn_kernel<T>, grid_for(n), dim3(kBlock), 0, stream,
                       static_cast<const T*>(x), static_cast<T*>(y), s, size, alpha, beta, bias);
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
