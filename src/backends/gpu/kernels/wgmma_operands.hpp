#pragma once
// What the two wgmma GEMM kernels share (gemm_f16_wgmma.cu: every warp multiplies and copies;
// gemm_f16_wgmma_ws.cu: a producer warpgroup copies, two consumer warpgroups multiply): the
// block tile's shape, the staged operands' layouts, one stage's products and the hand-over of
// the accumulators to the epilogue. NVIDIA sm_90a only (wgmma_tile.hpp).
#include <type_traits>

#include "backends/gpu/kernels/gemm_kernel.hpp"
#include "backends/gpu/kernels/wgmma_tile.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {

// A block computes 128 x BN outputs, each of two multiplying warpgroups 64 rows, in steps of
// 64 of the reduction.
constexpr int kWgBM = 128, kWgBK = 64;

// B not transposed ([k][n], n contiguous) in 64-column panels, each a SwizzledTile of Rows k
// rows of 64 columns: wgmma's n-major operand with the 128-byte swizzle.
template <typename S, int Rows, int Cols>
struct PanelTile {
  static constexpr int kRows = Rows, kCols = Cols, kElems = Rows * Cols;
  static constexpr int kPanelCols = 64;
  using Panel = SwizzledTile<S, Rows, kPanelCols>;
  static_assert(Cols % kPanelCols == 0);
  __device__ static int offset(int row, int col) {
    return (col / kPanelCols) * Panel::kElems + Panel::offset(row, col % kPanelCols);
  }
};

// A stage: A's 128 x 64 (k-major, swizzled), then B's 64 x BN: k-major when B is transposed
// (TB), else n-major in panels.
template <int BN, bool TB>
struct WgStage {
  using S = uint16_t;
  using LA = SwizzledTile<S, kWgBM, kWgBK>;
  using LB = std::conditional_t<TB, SwizzledTile<S, BN, kWgBK>, PanelTile<S, kWgBK, BN>>;
  static constexpr int kElems = LA::kElems + LB::kElems;
  static constexpr size_t kBytes = size_t{kElems} * sizeof(S);
};

// Bytes of a ring of Stages stages, and 1024 to align it: the swizzle is a function of address
// bits 4-9.
template <int BN, int Stages>
KILN_HOST_DEVICE constexpr size_t wgmma_smem_bytes() {
  return size_t{Stages} * (kWgBM + BN) * kWgBK * sizeof(uint16_t) + 1024;
}

// The float32 tile the epilogue reads back: rows of BN + 8 (the 8 keep a warp's stores of one
// column pair on distinct banks).
template <int BN>
constexpr int kWgAccStride = BN + 8;

#if defined(KILN_WGMMA)

// acc += the warpgroup's 64 rows of the stage's A times its B, four m64nBNk16 products, issued
// and committed as one group (the caller waits for it).
template <int BN, bool TB>
__device__ inline void multiply_stage(float (&acc)[BN / 2], const uint16_t* stage, int warpgroup) {
  using St = WgStage<BN, TB>;
  // Descriptor strides (bytes): k-major operands have 8-row groups of 128-byte rows; the
  // n-major B has 64-column panels of BK rows.
  constexpr uint32_t kGroupBytes = 8 * kWgBK * sizeof(uint16_t);
  constexpr uint32_t kPanelBytes = kWgBK * 64 * sizeof(uint16_t);
  const uint16_t* sa = stage + warpgroup * 64 * kWgBK;  // this warpgroup's 64 rows: 8 groups
  const uint16_t* sb = stage + St::LA::kElems;
  wgmma::pin(acc);
  wgmma::fence();
  KILN_UNROLL
  for (int kk = 0; kk < kWgBK; kk += 16) {
    const uint64_t da = wgmma::descriptor(sa + kk, 16, kGroupBytes);
    // k-major B: 16 columns further in its rows; n-major: 16 rows further (two groups).
    const uint64_t db = TB ? wgmma::descriptor(sb + kk, 16, kGroupBytes)
                           : wgmma::descriptor(sb + kk * 64, kPanelBytes, kGroupBytes);
    wgmma::mma<BN, TB ? 0 : 1>(acc, da, db);
  }
  wgmma::commit();
}

// Columns col0 .. col0 + Cols of the warpgroup's accumulators, times alpha, into rows 0..63 of
// `staged` (row stride kWgAccStride<Cols>): warp w of the warpgroup holds rows 16 w..
// (wgmma_tile.hpp's layout). A tile wider than its epilogue's buffer is staged in slices.
template <int BN, int Cols = BN>
__device__ inline void stage_accumulators(float* staged, const float (&acc)[BN / 2], float alpha,
                                          int col0 = 0) {
  static_assert(BN % Cols == 0 && Cols % 8 == 0);
  constexpr int kStride = kWgAccStride<Cols>;
  const int warp = (static_cast<int>(threadIdx.x) % 128) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int r = warp * 16 + lane / 4;
  const int c = 2 * (lane % 4);
  KILN_UNROLL
  for (int slice = 0; slice < BN / Cols; ++slice) {
    if (slice * Cols != col0) continue;  // unrolled: acc stays in registers (constant indices)
    KILN_UNROLL
    for (int jj = 0; jj < Cols / 8; ++jj) {
      const int j = slice * (Cols / 8) + jj;
      float* row0 = staged + r * kStride + 8 * jj + c;
      float* row8 = row0 + 8 * kStride;
      row0[0] = alpha * acc[4 * j], row0[1] = alpha * acc[4 * j + 1];
      row8[0] = alpha * acc[4 * j + 2], row8[1] = alpha * acc[4 * j + 3];
    }
  }
}

#endif  // KILN_WGMMA

}  // namespace kiln::backends::gpu::kernels::gemm_impl
