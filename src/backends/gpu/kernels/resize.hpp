#pragma once
// Launchers of Resize (resize.hip): each output element is the weighted sum of its taps along
// every resized dim (the product of the dims' taps), read through the input's strides. The taps
// (source index and weight per output index of a dim) come from the reference's plan
// (ops/resize_plan.hpp), computed on the host and uploaded once per input shape. Plain
// declarations: the runtime side (g++ on NVIDIA) includes this.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// Taps along one dim of the walk: `taps` per output index (0: the dim is not resized and the
// output index is the source index). index[q taps + t] is the source index of tap t of output
// index q; index[q taps] < 0 marks an output index that takes the extrapolation value.
// weight[q taps + t] is its weight (unused by the nearest kernel).
struct ResizeDim {
  int taps = 0;
  const int32_t* index = nullptr;
  const float* weight = nullptr;
};

// The walk: the output's dims in its storage order (so writes are contiguous), the input's
// element stride along each of them, and the taps of each.
struct ResizeWalk {
  int rank = 0;
  int64_t out_dims[kMaxDims] = {};
  int64_t in_strides[kMaxDims] = {};
  ResizeDim dims[kMaxDims] = {};
};

// Nearest: y[i] = x[offset of i's taps], elements of `elem_size` bytes (1, 2, 4 or 8) copied as
// they are; `fill` is the extrapolation value's bits in the element type.
hipError_t launch_resize_nearest(int elem_size, const void* x, void* y, int64_t n,
                                 const ResizeWalk& walk, uint64_t fill, hipStream_t stream);

// Linear and cubic (antialiased too): the weighted sum in float32, rounded once to `type`.
hipError_t launch_resize_interpolate(FloatType type, const void* x, void* y, int64_t n,
                                     const ResizeWalk& walk, float fill, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
