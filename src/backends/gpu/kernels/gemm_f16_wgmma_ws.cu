// Kiln's own float16 GEMM on wgmma with specialized warpgroups (sm_90a, NVIDIA only): one
// producer warpgroup copies operand stages, two consumer warpgroups multiply them, and the grid
// is persistent (one block a multiprocessor walks the output tiles). The copies, stages, products
// and epilogue are gemm_f16_wgmma.cu's (wgmma_operands.hpp, gemm_kernel.hpp's stagers and
// TileOutput); what changes is who waits for whom:
//
// - The ring's stages are handed over through shared-memory barriers, not block barriers:
//   `full[s]` completes when every producer thread's copies into stage s have landed (each
//   producer thread waits for its own copies, makes them visible to the tensor cores' reads and
//   arrives), `empty[s]` when the eight consumer warps have finished the products that read it.
//   So the producer runs up to a whole ring ahead of the products, and the consumers never wait
//   for copies to be issued.
// - A producer thread arrives for step t once it issued step t + kLag (its copies of t are then
//   waited for with kLag groups still in flight). The consumers release step t - 1 after
//   issuing t, so they hold two stages: kLag = kStages - 2 keeps the producer from waiting for a
//   release that waits for it.
// - The tile has an epilogue buffer of its own: the consumers read a tile out while the producer
//   already fills the ring with the next tile's steps.
//
// Measured on an H100 (2026-12-06): correct, but 1.75x cuBLASLt's time in geomean against the
// two-block tiles' 1.27x: each producer thread waits for its own copies before it hands a stage
// over. A 128 x 256 version (its epilogue through the ring, registers moved to the consumers
// with setmaxnreg) hung there and was removed. Forced by name only (s128x128x64).
#include <climits>

#include "backends/gpu/kernels/wgmma_operands.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {
namespace {

constexpr int kWsThreads = 384;  // the producer warpgroup, then two consumer warpgroups

// Named barriers (0 is __syncthreads'): one per consumer warpgroup.
constexpr int kBarWarpgroup0 = 1;

template <int BN>
struct WsShape {
  static constexpr int kStages = 4;
  static constexpr size_t kRingBytes = size_t{kStages} * (kWgBM + BN) * kWgBK * sizeof(uint16_t);
  static constexpr size_t kEpilogueBytes = size_t{kWgBM} * kWgAccStride<BN> * sizeof(float);
  // The ring 1024-byte aligned (the swizzle), then the epilogue's tile.
  static constexpr size_t kBytes = 1024 + kRingBytes + kEpilogueBytes;
  static_assert(kBytes <= 227 * 1024, "one block a multiprocessor");
};

template <int BN, bool TB, bool Conv>
__global__ void __launch_bounds__(kWsThreads, 1) wgmma_ws_kernel(GemmArgs p, SplitK split) {
#if defined(KILN_WGMMA)
  using S = uint16_t;
  using T = __half;
  using Shape = WsShape<BN>;
  using St = WgStage<BN, TB>;
  using LA = typename St::LA;
  using LB = typename St::LB;
  constexpr int BM = kWgBM, BK = kWgBK, kStages = Shape::kStages;
  constexpr int kLag = kStages - 2;
  constexpr int kAcc = BN / 2;
  constexpr int kAccStride = kWgAccStride<BN>;
  constexpr int kConsumerWarps = 8;

  __shared__ uint64_t full[kStages], empty[kStages];
  KILN_DYNAMIC_SHARED(Bytes16, ws_smem);
  unsigned char* const smem_bytes = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(ws_smem) + 1023) & ~uintptr_t{1023});
  S* const stages = reinterpret_cast<S*>(smem_bytes);
  float* const staged_acc = reinterpret_cast<float*>(smem_bytes + Shape::kRingBytes);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wgmma::barrier_init(&full[s], 128);
      wgmma::barrier_init(&empty[s], kConsumerWarps);
    }
  }
  __syncthreads();

  const int64_t m_tiles = (p.m + BM - 1) / BM, n_tiles = (p.n + BN - 1) / BN;
  const int64_t tiles_per_z = m_tiles * n_tiles;
  const int64_t tiles = tiles_per_z * p.batch * split.count;
  const int64_t ldb = TB ? p.k : p.n;
  const int64_t b_rows = TB ? p.n : p.k, b_cols = TB ? p.k : p.n;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  // The same walk for every warpgroup: tile -> (z, m tile, n tile), n fastest (neighbouring
  // blocks share A's rows).
  auto locate = [&](int64_t tile, int64_t& zz, int64_t& m0, int64_t& n0) {
    zz = tile / tiles_per_z;
    const int64_t at = tile - zz * tiles_per_z;
    m0 = (at / n_tiles) * BM;
    n0 = (at % n_tiles) * BN;
  };

  if (warpgroup == 0) {
    // The producer. Its thread index is 0..127: the stagers share the chunks among 128.
    uint32_t g = 0;  // steps issued over the block's tiles: stage g % kStages
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int64_t zz, m0, n0;
      locate(tile, zz, m0, n0);
      const BlockPart part = block_part(p, split, BK, zz);
      const S* a = static_cast<const S*>(p.a) + part.z * p.stride_a;
      const S* b = static_cast<const S*>(p.b) + part.z * p.stride_b;
      std::conditional_t<Conv, ConvStager<S, 128, LA>, VectorStager<S, 128, LA, true>> stage_a;
      VectorStager<S, 128, LB, TB> stage_b;
      if constexpr (Conv) {
        stage_a.init(a, p.conv, p.m, p.k, m0, part.first_step);
      } else {
        stage_a.init(a, p.k, p.m, p.k, m0);
      }
      stage_b.init(b, ldb, b_rows, b_cols, n0);
      for (int t = 0; t < part.steps; ++t, ++g) {
        const uint32_t s = g % kStages;
        // Refilling: the consumers' release of this stage's previous use.
        if (g >= kStages) wgmma::barrier_wait(&empty[s], ((g / kStages) + 1) & 1);
        S* st = stages + s * St::kElems;
        stage_a.issue(st, part.first_step + t);
        stage_b.issue(st + LA::kElems, part.first_step + t);
        copy_async_commit();
        if (t >= kLag) {
          copy_async_wait<kLag>();
          wgmma::fence_async_shared();
          wgmma::barrier_arrive(&full[(g - kLag) % kStages]);
        }
      }
      // The tile's last steps (up to kLag of them) handed over.
      copy_async_wait<0>();
      wgmma::fence_async_shared();
      const uint32_t held = static_cast<uint32_t>(part.steps < kLag ? part.steps : kLag);
      for (uint32_t u = g - held; u < g; ++u) wgmma::barrier_arrive(&full[u % kStages]);
    }
  } else {
    // A consumer: rows 64 (warpgroup - 1).. of each tile.
    const int cw = warpgroup - 1;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int wg_thread = static_cast<int>(threadIdx.x) % 128;
    float* const my_staged = staged_acc + cw * 64 * kAccStride;
    constexpr int kOutChunk = TileOutput<T>::kChunk;
    constexpr int kOutChunksPerRow = BN / kOutChunk;
    constexpr int kChunks = 64 * kOutChunksPerRow;
    static_assert(kChunks % 128 == 0);
    uint32_t g = 0;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int64_t zz, m0, n0;
      locate(tile, zz, m0, n0);
      const BlockPart part = block_part(p, split, BK, zz);
      float acc[kAcc];
      KILN_UNROLL
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
      for (int t = 0; t < part.steps; ++t, ++g) {
        const uint32_t s = g % kStages;
        wgmma::barrier_wait(&full[s], (g / kStages) & 1);
        multiply_stage<BN, TB>(acc, stages + s * St::kElems, cw);
        wgmma::wait<1>();
        wgmma::pin(acc);
        // The products of step t - 1 are done: its stage may be refilled.
        if (t > 0 && lane == 0) wgmma::barrier_arrive(&empty[(g - 1) % kStages]);
      }
      wgmma::wait<0>();
      wgmma::pin(acc);
      if (part.steps > 0 && lane == 0) wgmma::barrier_arrive(&empty[(g - 1) % kStages]);
      stage_accumulators<BN>(my_staged, acc, p.alpha);
      wgmma::sync_named(kBarWarpgroup0 + cw, 128);
      // Set up after the products: its registers are not held through them.
      TileOutput<T> out;
      out.init(p, part.z, part.zz, split);
      KILN_UNROLL
      for (int it = 0; it < kChunks / 128; ++it) {
        const int chunk = wg_thread + it * 128;
        const int tr = chunk / kOutChunksPerRow, cc = (chunk % kOutChunksPerRow) * kOutChunk;
        const int64_t row = m0 + cw * 64 + tr, col = n0 + cc;
        if (row >= p.m || col >= p.n) continue;
        out.store_staged(p, row, col, my_staged + tr * kAccStride + cc);
      }
      // The warpgroup's rows read out before its next tile's accumulators land there.
      wgmma::sync_named(kBarWarpgroup0 + cw, 128);
    }
  }
#endif
}

template <int BN, bool TB, bool Conv>
hipError_t launch_ws_tile(const GemmArgs& p, SplitK split, hipStream_t stream) {
  const int64_t tiles = ((p.m + kWgBM - 1) / kWgBM) * ((p.n + BN - 1) / BN) * p.batch * split.count;
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : tiles;
  const int64_t blocks = tiles < sms ? tiles : sms;
  if (blocks <= 0 || blocks > INT_MAX) return hipErrorInvalidValue;
  auto* kernel = &wgmma_ws_kernel<BN, TB, Conv>;
  static unsigned long long devices_done = 0;
  constexpr size_t kBytes = WsShape<BN>::kBytes;
  const hipError_t allowed =
      allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kBytes, devices_done);
  if (allowed != hipSuccess) return allowed;
  hipLaunchKernelGGL(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWsThreads), kBytes, stream,
                     p, split);
  return hipGetLastError();
}

template <int BN>
hipError_t launch_ws_width(const GemmArgs& p, SplitK split, hipStream_t stream) {
  if (p.conv_a) return launch_ws_tile<BN, true, true>(p, split, stream);
  return p.trans_b ? launch_ws_tile<BN, true, false>(p, split, stream)
                   : launch_ws_tile<BN, false, false>(p, split, stream);
}

}  // namespace

hipError_t launch_f16_wgmma_ws(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  if (p.trans_a) return hipErrorInvalidValue;
  switch (tile) {
    case TileId::Specialized128:
      return launch_ws_width<128>(p, split, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace kiln::backends::gpu::kernels::gemm_impl
