// ReduceSum / ReduceMean / ReduceMax / ReduceMin: a wavefront per output (or a block, when
// more than kWarpRowMax elements reduce into it), its lanes walking the reduced elements in
// row-major order, so a reduction over the innermost axes reads contiguous memory.
#include <cmath>

#include "backends/gpu/kernels/reduce.hpp"
#include "backends/gpu/kernels/row_group.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

template <ReduceOp Op>
struct Reducer {
  __device__ static float identity() {
    if constexpr (Op == ReduceOp::Max) return -INFINITY;
    if constexpr (Op == ReduceOp::Min) return INFINITY;
    return 0.f;
  }
  __device__ float operator()(float a, float b) const {
    if constexpr (Op == ReduceOp::Max) return MaxOp{}(a, b);
    if constexpr (Op == ReduceOp::Min) return MinOp{}(a, b);
    return a + b;
  }
};

template <typename T, ReduceOp Op, bool BlockPerRow>
__global__ void reduce_kernel(const T* x, T* out, int64_t outputs, StridedShape kept, int64_t count,
                              StridedShape reduced) {
  __shared__ float scratch[kReduceScratch];
  const RowGroup<BlockPerRow> g;
  const Reducer<Op> op;
  for (int64_t o = g.first_row; o < outputs; o += g.row_stride) {
    int64_t base[1];
    strided_offsets<int64_t, 1>(kept, o, base);
    float acc = Reducer<Op>::identity();
    for (int64_t r = g.lane; r < count; r += g.lanes) {
      int64_t off[1];
      strided_offsets<int64_t, 1>(reduced, r, off);
      acc = op(acc, to_float(x[base[0] + off[0]]));
    }
    acc = g.reduce(acc, op, scratch);
    if constexpr (Op == ReduceOp::Mean) acc /= static_cast<float>(count);
    if (g.lane == 0) out[o] = from_float<T>(acc);
  }
}

template <typename T, ReduceOp Op>
hipError_t reduce_typed(const void* x, void* out, int64_t outputs, const StridedShape& kept,
                        int64_t count, const StridedShape& reduced, hipStream_t stream) {
  const T* px = static_cast<const T*>(x);
  T* po = static_cast<T*>(out);
  if (count > kWarpRowMax) {
    auto* kernel = &reduce_kernel<T, Op, true>;
    hipLaunchKernelGGL(kernel, row_grid(outputs, true), dim3(kBlock), 0, stream, px, po, outputs,
                       kept, count, reduced);
  } else {
    auto* kernel = &reduce_kernel<T, Op, false>;
    hipLaunchKernelGGL(kernel, row_grid(outputs, false), dim3(kBlock), 0, stream, px, po, outputs,
                       kept, count, reduced);
  }
  return hipGetLastError();
}

}  // namespace

hipError_t launch_reduce(ReduceOp op, FloatType type, const void* x, void* out, int64_t outputs,
                         const StridedShape& kept, int64_t count, const StridedShape& reduced,
                         hipStream_t stream) {
  if (outputs <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() {
    switch (op) {
      case ReduceOp::Sum:
        return reduce_typed<T, ReduceOp::Sum>(x, out, outputs, kept, count, reduced, stream);
      case ReduceOp::Mean:
        return reduce_typed<T, ReduceOp::Mean>(x, out, outputs, kept, count, reduced, stream);
      case ReduceOp::Max:
        return reduce_typed<T, ReduceOp::Max>(x, out, outputs, kept, count, reduced, stream);
      case ReduceOp::Min:
        return reduce_typed<T, ReduceOp::Min>(x, out, outputs, kept, count, reduced, stream);
    }
    return hipErrorInvalidValue;
  });
}

}  // namespace kiln::backends::gpu::kernels
