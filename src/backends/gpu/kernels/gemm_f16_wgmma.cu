// Kiln's own GEMM in float16 on Hopper's warpgroup matrix instructions (wgmma_tile.hpp): the
// NVIDIA sm_90 tiles of launch_gemm (gemm.hip), built for sm_90a alone (CMake: its own object
// library). Everything but the multiply is the portable kernel's (gemm_kernel.hpp): the same
// staging copies into the same swizzled stages (whose 128-byte rows are exactly wgmma's 128-byte
// swizzle), the same implicit-GEMM convolution stager, split-K and epilogue (TileOutput).
//
// A block of two warpgroups computes a 128 x BN tile, each warpgroup 64 rows with one
// m64nBNk16 instruction per 16 of the reduction. The reduction runs in steps of 64 through a
// ring of kStages stages: the copies of step t + kStages - 2 are issued while step t is
// multiplied, and each warpgroup keeps one step's multiplies in flight while the next is
// issued (wait for all but one group), so a stage is refilled two steps after it was read,
// when every warpgroup has passed the barrier that follows its wait. One barrier per step.
// Deep rings (three stages) issue step t + kStages - 1 instead, each warpgroup first waiting for
// all of its multiplies: one more step of copies in flight for one less of multiplies.
#include "backends/gpu/kernels/wgmma_operands.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {
namespace {

constexpr int kWgThreads = 256;

// How a block stages A: a matrix's rows, a convolution's im2col rows decoded tap by tap, or
// (a 1 x 1 filter) the input pixels' rows. A kernel of its own each, so that a pixel row, which
// needs no tap state, does not carry the tap decoding's registers at the two-block tiles'
// 128-register limit (ptxas reports small spills in both).
enum class AStaging { Rows, ConvTaps, ConvPixels };

template <int BN, int Stages, int MinBlocks, bool TB, AStaging A, bool Deep>
__global__ void __launch_bounds__(kWgThreads, MinBlocks)
    wgmma_gemm_kernel(GemmArgs p, SplitK split) {
#if defined(KILN_WGMMA)
  using S = uint16_t;
  using T = __half;
  constexpr int BM = kWgBM, BK = kWgBK, kThreads = kWgThreads, kStages = Stages;
  static_assert(kStages >= 3, "a stage is refilled two steps after it is read");
  using St = WgStage<BN, TB>;
  using LA = typename St::LA;
  using LB = typename St::LB;
  constexpr int kStageElems = St::kElems;
  constexpr int kAcc = BN / 2;  // floats a thread holds: 64 x BN over 128 threads
  constexpr int kAccStride = kWgAccStride<BN>;
  static_assert(size_t{BM} * kAccStride * sizeof(float) <= wgmma_smem_bytes<BN, Stages>() - 1024,
                "the epilogue stages the tile through the ring's memory");
  constexpr int kOutChunk = TileOutput<T>::kChunk;
  constexpr int kOutChunksPerRow = BN / kOutChunk;

  KILN_DYNAMIC_SHARED(Bytes16, wgmma_smem);
  unsigned char* const smem_bytes = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(wgmma_smem) + 1023) & ~uintptr_t{1023});
  S* const stages = reinterpret_cast<S*>(smem_bytes);
  float* const staged_acc = reinterpret_cast<float*>(smem_bytes);

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const BlockPart part = block_part(p, split, BK);
  const int first_step = part.first_step, steps = part.steps;
  const S* a = static_cast<const S*>(p.a) + part.z * p.stride_a;
  const S* b = static_cast<const S*>(p.b) + part.z * p.stride_b;
  TileOutput<T> out;
  out.init(p, part.z, part.zz, split);
  const int64_t ldb = TB ? p.k : p.n;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t m_tiles = (p.m + BM - 1) / BM;
  const int64_t b_rows = TB ? p.n : p.k, b_cols = TB ? p.k : p.n;

  for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
    const int64_t m0 = mt * BM;
    std::conditional_t<A == AStaging::ConvTaps, ConvStager<S, kThreads, LA>,
                       VectorStager<S, kThreads, LA, true>>
        stage_a;
    VectorStager<S, kThreads, LB, TB> stage_b;
    if constexpr (A == AStaging::ConvTaps) {
      stage_a.init(a, p.conv, p.m, p.k, m0, first_step);
    } else if constexpr (A == AStaging::ConvPixels) {
      stage_a.init_pixels(a, p.conv, p.m, m0);
    } else {
      stage_a.init(a, p.k, p.m, p.k, m0);
    }
    stage_b.init(b, ldb, b_rows, b_cols, n0);
    out.template prefetch_c<BM, BN, kThreads>(p, m0, n0, static_cast<int>(threadIdx.x));
    auto issue = [&](int step) {
      S* st = stages + (step % kStages) * kStageElems;
      stage_a.issue(st, first_step + step);
      stage_b.issue(st + LA::kElems, first_step + step);
    };
    float acc[kAcc];
    KILN_UNROLL
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    // Steps in flight ahead of the one multiplied: Deep refills the stage of step t - 1, so each
    // warpgroup first waits for its multiplies of that step (done by then, as a rule: step t's
    // copies were waited for since); otherwise the stage of step t - 2, with step t - 1's
    // multiplies left in flight.
    constexpr int kAhead = Deep ? kStages - 1 : kStages - 2;
    KILN_UNROLL
    for (int s = 0; s < kAhead; ++s) {
      if (s < steps) issue(s);
      copy_async_commit();
    }
    for (int t = 0; t < steps; ++t) {
      copy_async_wait<kAhead - 1>();
      if constexpr (Deep) {
        wgmma::wait<0>();
        wgmma::pin(acc);
      }
      wgmma::fence_async_shared();
      // Step t visible to all; every warpgroup past its wait for the step whose stage the next
      // copies refill.
      __syncthreads();
      if (t + kAhead < steps) issue(t + kAhead);
      copy_async_commit();
      multiply_stage<BN, TB>(acc, stages + (t % kStages) * kStageElems, warpgroup);
      if constexpr (!Deep) {
        wgmma::wait<1>();
        wgmma::pin(acc);
      }
    }
    wgmma::wait<0>();
    wgmma::pin(acc);
    copy_async_wait<0>();
    // Every warpgroup done with the stages before the accumulators land in their memory.
    __syncthreads();
    stage_accumulators<BN>(staged_acc + warpgroup * 64 * kAccStride, acc, p.alpha);
    __syncthreads();
    constexpr int kChunks = BM * kOutChunksPerRow;
    static_assert(kChunks % kThreads == 0);
    // Not unrolled: one copy of the copy-out's code (unrolled 8-16 times it crowded the
    // instruction cache; see gemm_f16_wgmma_ws.cu).
    KILN_NO_UNROLL
    for (int it = 0; it < kChunks / kThreads; ++it) {
      const int chunk = static_cast<int>(threadIdx.x) + it * kThreads;
      const int tr = chunk / kOutChunksPerRow, cc = (chunk % kOutChunksPerRow) * kOutChunk;
      const int64_t row = m0 + tr, col = n0 + cc;
      if (row >= p.m || col >= p.n) continue;
      out.store_staged(p, row, col, staged_acc + tr * kAccStride + cc);
    }
    // The tile read out before the next tile's copies land in the same memory.
    __syncthreads();
  }
#endif
}

template <int BN, int Stages, int MinBlocks, bool TB, AStaging A, bool Deep>
hipError_t launch_wgmma_tile(const GemmArgs& p, SplitK split, hipStream_t stream) {
  const int64_t n_tiles = (p.n + BN - 1) / BN;
  const int64_t m_tiles = (p.m + kWgBM - 1) / kWgBM;
  if (n_tiles > INT_MAX || p.batch * split.count > 65535) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>(m_tiles < 65535 ? m_tiles : 65535),
                  static_cast<unsigned>(p.batch * split.count));
  auto* kernel = &wgmma_gemm_kernel<BN, Stages, MinBlocks, TB, A, Deep>;
  static unsigned long long devices_done = 0;
  constexpr size_t kBytes = wgmma_smem_bytes<BN, Stages>();
  const hipError_t allowed =
      allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kBytes, devices_done);
  if (allowed != hipSuccess) return allowed;
  hipLaunchKernelGGL(kernel, grid, dim3(kWgThreads), kBytes, stream, p, split);
  return hipGetLastError();
}

template <int BN, int Stages, int MinBlocks = 1>
hipError_t launch_wgmma_width(const GemmArgs& p, SplitK split, hipStream_t stream) {
  static_assert(MinBlocks * wgmma_smem_bytes<BN, Stages>() <= 227 * 1024,
                "the blocks a multiprocessor should hold fit its shared memory");
  // A ring of three stages keeps one step in flight the usual way; with one more (Deep) the
  // 128-wide pair's latency-bound short products went 3-8 % faster on the H100 (ResNet-50 b64's
  // 1x1 convolutions of 128 filters, e.g. layer2.0's 79.4 -> 74.8-75.6 us), while the four-stage
  // 64-wide pair's were 5 % slower that way
  // (bench/results/2026-12-07h-gpu-own-lookahead-h100.md).
  constexpr bool kDeep = Stages == 3;
  constexpr auto kRows = AStaging::Rows;
  if (p.conv_a && p.conv.r == 1 && p.conv.s == 1) {
    return launch_wgmma_tile<BN, Stages, MinBlocks, true, AStaging::ConvPixels, kDeep>(p, split,
                                                                                       stream);
  }
  if (p.conv_a) {
    return launch_wgmma_tile<BN, Stages, MinBlocks, true, AStaging::ConvTaps, kDeep>(p, split,
                                                                                     stream);
  }
  return p.trans_b
             ? launch_wgmma_tile<BN, Stages, MinBlocks, true, kRows, kDeep>(p, split, stream)
             : launch_wgmma_tile<BN, Stages, MinBlocks, false, kRows, kDeep>(p, split, stream);
}

}  // namespace

// The stages of each width fill what one block may take (227 KiB): 8 x 24, 6 x 32, 4 x 48 KiB;
// the pairs' half of it each: 4 x 24 and 3 x 32 KiB (the epilogue's float32 tile, 36 and
// 68 KiB, fits in their rings).
hipError_t launch_f16_wgmma(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  if (p.trans_a) return hipErrorInvalidValue;
  switch (tile) {
    case TileId::Warpgroup64:
      return launch_wgmma_width<64, 8>(p, split, stream);
    case TileId::Warpgroup128:
      return launch_wgmma_width<128, 6>(p, split, stream);
    case TileId::Warpgroup256:
      return launch_wgmma_width<256, 4>(p, split, stream);
    case TileId::Warpgroup64Pair:
      return launch_wgmma_width<64, 4, 2>(p, split, stream);
    case TileId::Warpgroup128Pair:
      return launch_wgmma_width<128, 3, 2>(p, split, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace kiln::backends::gpu::kernels::gemm_impl
