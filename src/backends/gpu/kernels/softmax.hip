// Softmax and LogSoftmax: max, sum of exp(x - max), then the output, each pass over the row in
// fp32. Contiguous rows (the last axis) take a wavefront or a block per row; any other axis a
// thread per (outer, inner) column, whose loads are coalesced along inner.
#include "backends/gpu/kernels/row_group.hpp"
#include "backends/gpu/kernels/softmax.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

// Every element of a row is read in the first two passes before any is written in the third
// (the group's reductions order them), so y may be x.
template <typename T, bool BlockPerRow>
__global__ void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  __shared__ float scratch[kReduceScratch];
  const RowGroup<BlockPerRow> g;
  for (int64_t row = g.first_row; row < rows; row += g.row_stride) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    float top = -INFINITY;
    for (int64_t j = g.lane; j < n; j += g.lanes) top = MaxOp{}(top, to_float(xr[j]));
    top = g.reduce(top, MaxOp{}, scratch);
    float sum = 0.f;
    for (int64_t j = g.lane; j < n; j += g.lanes) sum += expf(to_float(xr[j]) - top);
    sum = g.reduce(sum, SumOp{}, scratch);
    if (log) {
      const float log_sum = logf(sum);
      for (int64_t j = g.lane; j < n; j += g.lanes)
        yr[j] = from_float<T>(to_float(xr[j]) - top - log_sum);
    } else {
      const float inv = 1.f / sum;
      for (int64_t j = g.lane; j < n; j += g.lanes)
        yr[j] = from_float<T>(expf(to_float(xr[j]) - top) * inv);
    }
  }
}

// One thread per column (o, i) of [outer, n, inner]: elements n apart by `inner`.
template <typename T>
__global__ void softmax_columns(const T* x, T* y, int64_t outer, int64_t n, int64_t inner,
                                bool log) {
  const int64_t columns = outer * inner;
  for (int64_t c = global_thread(); c < columns; c += grid_threads()) {
    const int64_t o = c / inner;
    const int64_t base = o * n * inner + (c - o * inner);
    float top = -INFINITY;
    for (int64_t j = 0; j < n; ++j) top = MaxOp{}(top, to_float(x[base + j * inner]));
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += expf(to_float(x[base + j * inner]) - top);
    const float log_sum = logf(sum), inv = 1.f / sum;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_float(x[base + j * inner]) - top;
      y[base + j * inner] = from_float<T>(log ? v - log_sum : expf(v) * inv);
    }
  }
}

}  // namespace

hipError_t launch_softmax(FloatType type, const void* x, void* y, int64_t outer, int64_t axis,
                          int64_t inner, bool log, hipStream_t stream) {
  if (outer <= 0 || axis <= 0 || inner <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() {
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (inner > 1) {
      auto* kernel = &softmax_columns<T>;
      hipLaunchKernelGGL(kernel, grid_for(outer * inner), dim3(kBlock), 0, stream, px, py, outer,
                         axis, inner, log);
    } else if (axis > kWarpRowMax) {
      auto* kernel = &softmax_rows<T, true>;
      hipLaunchKernelGGL(kernel, row_grid(outer, true), dim3(kBlock), 0, stream, px, py, outer,
                         axis, log);
    } else {
      auto* kernel = &softmax_rows<T, false>;
      hipLaunchKernelGGL(kernel, row_grid(outer, false), dim3(kBlock), 0, stream, px, py, outer,
                         axis, log);
    }
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
