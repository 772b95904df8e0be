#pragma once
// Who works on a row in the row-wise kernels (softmax, layer norm): one wavefront per row for
// short rows (many rows per block, no barriers), or the whole block per row for long ones.
// Device code only. Rows are walked grid-stride, so the grid the host picks (it cannot know
// the device's wavefront size on AMD, where wave32 and wave64 targets share one host pass)
// only sets how many rows run at once, never which rows run.
#include "backends/gpu/kernels/device_common.hpp"

namespace kiln::backends::gpu::kernels {

// Rows up to this long take a wavefront each.
inline constexpr int64_t kWarpRowMax = 1024;

template <bool BlockPerRow>
struct RowGroup {
  int64_t first_row;
  int64_t row_stride;
  int lane;   // this thread's index within the row's group
  int lanes;  // threads per row

  __device__ RowGroup() {
    if constexpr (BlockPerRow) {
      first_row = blockIdx.x;
      row_stride = gridDim.x;
      lane = threadIdx.x;
      lanes = blockDim.x;
    } else {
      const int warps = blockDim.x / KILN_WARP_SIZE;
      first_row = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / KILN_WARP_SIZE;
      row_stride = static_cast<int64_t>(gridDim.x) * warps;
      lane = threadIdx.x % KILN_WARP_SIZE;
      lanes = KILN_WARP_SIZE;
    }
  }

  // Every thread of the group gets the reduction over the group. Block mode holds barriers:
  // every thread of the block walks the same rows, so all reach them.
  template <typename Op>
  __device__ float reduce(float v, Op op, float* scratch) const {
    if constexpr (BlockPerRow) {
      return block_all_reduce(v, op, scratch);
    } else {
      (void)scratch;
      return warp_all_reduce(v, op);
    }
  }
};

// Shared scratch of block_all_reduce: one float per wavefront of a kBlock-thread block.
inline constexpr int kReduceScratch = kBlock / 32;

// Blocks for `rows` rows: the host assumes the widest case (wave32: kBlock / 32 rows a block).
inline dim3 row_grid(int64_t rows, bool block_per_row) {
  return grid_for(block_per_row ? rows * kBlock : rows * 32);
}

}  // namespace kiln::backends::gpu::kernels
