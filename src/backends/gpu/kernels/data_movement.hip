// Element moves by size (dispatch_size): the element types are unsigned integers of 1, 2, 4 and
// 8 bytes, so one instantiation serves every dtype of that size (bool, fp16, float, int64, ...).
#include <climits>

#include "backends/gpu/kernels/data_movement.hpp"
#include "backends/gpu/kernels/device_common.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

template <typename W, typename Index>
__global__ void strided_copy_kernel(const W* src, W* dst, Index n, StridedShape s) {
  const Index stride = static_cast<Index>(grid_threads());
  for (Index i = static_cast<Index>(global_thread()); i < n; i += stride) {
    Index off[2];
    strided_offsets<Index, 2>(s, i, off);
    dst[off[1]] = src[off[0]];
  }
}

template <typename W, typename I>
__global__ void gather_kernel(const W* data, const I* indices, W* out, int64_t outer, int64_t axis,
                              int64_t inner, int64_t count) {
  const int64_t n = outer * count * inner;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t in = i % inner;
    const int64_t t = i / inner;
    const int64_t j = t % count;
    const int64_t o = t / count;
    int64_t k = static_cast<int64_t>(indices[j]);
    if (k < 0) k += axis;
    out[i] = (k >= 0 && k < axis) ? data[(o * axis + k) * inner + in] : W(0);
  }
}

// One thread per element of the parts read: finds its part (a few compares) and writes it there.
template <typename W>
__global__ void split_kernel(const W* data, int64_t outer, int64_t axis, int64_t inner,
                             SplitParts parts) {
  const int64_t first = parts.begin[0], span = parts.begin[parts.count] - first;
  const int64_t n = outer * span * inner;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t in = i % inner;
    const int64_t t = i / inner;
    const int64_t a = first + t % span;
    const int64_t o = t / span;
    int k = 0;
    while (k + 1 < parts.count && a >= parts.begin[k + 1]) ++k;
    const int64_t len = parts.begin[k + 1] - parts.begin[k];
    static_cast<W*>(parts.dst[k])[(o * len + (a - parts.begin[k])) * inner + in] =
        data[(o * axis + a) * inner + in];
  }
}

template <typename W, typename Index>
__global__ void where_kernel(const uint8_t* cond, const W* x, const W* y, W* out, Index n,
                             StridedShape s) {
  const Index stride = static_cast<Index>(grid_threads());
  for (Index i = static_cast<Index>(global_thread()); i < n; i += stride) {
    Index off[3];
    strided_offsets<Index, 3>(s, i, off);
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}

}  // namespace

hipError_t launch_strided_copy(int elem_size, const void* src, void* dst, int64_t n,
                               const StridedShape& shape, int64_t span, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_size(elem_size, [&]<typename W>() {
    const W* s = static_cast<const W*>(src);
    W* d = static_cast<W*>(dst);
    if (span <= INT_MAX && n <= INT_MAX) {
      auto* kernel = &strided_copy_kernel<W, int32_t>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, s, d,
                         static_cast<int32_t>(n), shape);
    } else {
      auto* kernel = &strided_copy_kernel<W, int64_t>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, s, d, n, shape);
    }
    return hipGetLastError();
  });
}

hipError_t launch_gather(int elem_size, const void* data, const void* indices, bool indices64,
                         void* out, int64_t outer, int64_t axis, int64_t inner, int64_t count,
                         hipStream_t stream) {
  const int64_t n = outer * count * inner;
  if (n <= 0) return hipSuccess;
  return dispatch_size(elem_size, [&]<typename W>() {
    const W* d = static_cast<const W*>(data);
    W* o = static_cast<W*>(out);
    if (indices64) {
      auto* kernel = &gather_kernel<W, int64_t>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, d,
                         static_cast<const int64_t*>(indices), o, outer, axis, inner, count);
    } else {
      auto* kernel = &gather_kernel<W, int32_t>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, d,
                         static_cast<const int32_t*>(indices), o, outer, axis, inner, count);
    }
    return hipGetLastError();
  });
}

hipError_t launch_split(int elem_size, const void* data, int64_t outer, int64_t axis, int64_t inner,
                        const SplitParts& parts, hipStream_t stream) {
  if (parts.count <= 0 || parts.count > SplitParts::kMaxParts) return hipErrorInvalidValue;
  const int64_t n = outer * (parts.begin[parts.count] - parts.begin[0]) * inner;
  if (n <= 0) return hipSuccess;
  return dispatch_size(elem_size, [&]<typename W>() {
    auto* kernel = &split_kernel<W>;
    hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, static_cast<const W*>(data),
                       outer, axis, inner, parts);
    return hipGetLastError();
  });
}

hipError_t launch_where(int elem_size, const void* cond, const void* x, const void* y, void* out,
                        int64_t n, const StridedShape& shape, hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_size(elem_size, [&]<typename W>() {
    const uint8_t* c = static_cast<const uint8_t*>(cond);
    const W* px = static_cast<const W*>(x);
    const W* py = static_cast<const W*>(y);
    W* o = static_cast<W*>(out);
    // Operand offsets are below their element counts, which are at most n.
    if (n <= INT_MAX) {
      auto* kernel = &where_kernel<W, int32_t>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, c, px, py, o,
                         static_cast<int32_t>(n), shape);
    } else {
      auto* kernel = &where_kernel<W, int64_t>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream, c, px, py, o, n, shape);
    }
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
