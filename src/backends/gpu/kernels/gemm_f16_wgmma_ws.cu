// Kiln's own float16 GEMM on wgmma with specialized warpgroups (sm_90a, NVIDIA only): one
// producer warpgroup copies operand stages, two consumer warpgroups multiply them, and the grid
// is persistent (one block a multiprocessor walks the output tiles). The stages, products and
// epilogue are gemm_f16_wgmma.cu's (wgmma_operands.hpp, gemm_kernel.hpp's TileOutput); what
// changes is who copies and who waits for whom:
//
// - The ring's stages are handed over through shared-memory barriers, not block barriers:
//   `full[s]` completes when stage s's copies have landed, `empty[s]` when the eight consumer
//   warps have finished the products that read it. So the producer runs up to a whole ring
//   ahead of the products, and the consumers never wait for copies to be issued.
// - Two producers. **Bulk tensor copies** (Tma: Hopper's TMA unit): one thread issues each
//   stage as a few tensor copies (a tensor map per operand, set up by the host at the launch)
//   that land already in the 128-byte swizzle and complete `full[s]` themselves by their byte
//   count; rows and columns past the matrix arrive as zeros. An implicit-GEMM convolution's A
//   is copied in im2col mode (the map walks output pixels through the input's windows, the
//   step's filter tap as offsets; channels a multiple of 64). **cp.async** (a convolution the
//   im2col map cannot describe, or a driver without tensor maps): the 128 producer threads run
//   the portable stagers, and a thread arrives for step t once it issued step t + kLag (its
//   copies of t are then waited for with kLag groups still in flight); the consumers release
//   step t - 1 after issuing t, so they hold two stages: kLag = kStages - 2.
// - The tile has an epilogue buffer of its own: the consumers read a tile out while the producer
//   already fills the ring with the next tile's steps.
//
// Measured on an H100 (2026-12-06): the cp.async producer is correct, but 1.75x cuBLASLt's time
// in geomean against the two-block tiles' 1.27x: each producer thread waits for its own copies
// before it hands a stage over. The bulk copies have no such wait. A 128 x 256 version (its
// epilogue through the ring, registers moved to the consumers with setmaxnreg) hung there and
// was removed.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <climits>
#include <mutex>

#include "backends/gpu/kernels/wgmma_operands.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {
namespace {

constexpr int kWsThreads = 384;  // the producer warpgroup, then two consumer warpgroups

// Named barriers (0 is __syncthreads'): one per consumer warpgroup.
constexpr int kBarWarpgroup0 = 1;

// The consumers hold two stages (the one multiplied and the one whose products may still run),
// so a ring of S stages lets the producer run S - 2 ahead: as many stages as fit beside an
// epilogue buffer of a slice of the tile's columns (staged and written out one slice after
// another). 128 x 128: five stages, 64 columns; 128 x 256 (m64n256 products: half the
// shared-memory reads of B a product): four stages, 32 columns.
template <int BN>
struct WsShape {
  static constexpr int kStages = BN <= 128 ? 5 : 4;
  static constexpr int kEpilogueCols = BN <= 128 ? 64 : 32;
  static constexpr size_t kRingBytes = size_t{kStages} * (kWgBM + BN) * kWgBK * sizeof(uint16_t);
  static constexpr size_t kEpilogueBytes =
      size_t{kWgBM} * kWgAccStride<kEpilogueCols> * sizeof(float);
  // The ring 1024-byte aligned (the swizzle), then the epilogue's tile.
  static constexpr size_t kBytes = 1024 + kRingBytes + kEpilogueBytes;
  static_assert(kBytes <= 227 * 1024, "one block a multiprocessor");
};

// The bulk copies' tensor maps (the host encodes them at the launch): A's rows of K, and B's
// rows (k-major when transposed, else 64-column panels of its n-contiguous rows); each 3-d with
// the batch outermost. `batched_*`: whether the batch coordinate moves (0: one matrix for all).
struct TensorMaps {
  CUtensorMap a, b;
  int batched_a, batched_b;
};

template <int BN, bool TB, bool Conv, bool Tma>
__global__ void __launch_bounds__(kWsThreads, 1)
    wgmma_ws_kernel(GemmArgs p, SplitK split, const __grid_constant__ TensorMaps maps) {
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
  constexpr int kEpilogueCols = Shape::kEpilogueCols;
  constexpr int kAccStride = kWgAccStride<kEpilogueCols>;
  constexpr int kConsumerWarps = 8;

  __shared__ uint64_t full[kStages], empty[kStages];
  KILN_DYNAMIC_SHARED(Bytes16, ws_smem);
  unsigned char* const smem_bytes = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(ws_smem) + 1023) & ~uintptr_t{1023});
  S* const stages = reinterpret_cast<S*>(smem_bytes);
  float* const staged_acc = reinterpret_cast<float*>(smem_bytes + Shape::kRingBytes);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Tma: one arrival (the issuing thread's, with the stage's byte count); else every
      // producer thread's.
      wgmma::barrier_init(&full[s], Tma ? 1 : 128);
      wgmma::barrier_init(&empty[s], kConsumerWarps);
    }
    wgmma::fence_barrier_init();
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

  // 128 x 256 tiles hold 128 accumulators a consumer thread: the producer's registers move to
  // the consumers (a thread of each warpgroup: 24 + 2 x 240 = 504 of 512; the cp.async
  // producer's stagers keep 56: 56 + 2 x 224).
  constexpr bool kMoveRegisters = BN > 128;
  constexpr int kProducerRegs = Tma ? 24 : 56, kConsumerRegs = Tma ? 240 : 224;
  if (warpgroup == 0) {
    if constexpr (kMoveRegisters) wgmma::release_registers<kProducerRegs>();
    if constexpr (Tma) {
      // The producer: one thread issues every stage's bulk copies; the warpgroup's others
      // have nothing to do.
      if (threadIdx.x != 0) return;
      constexpr uint32_t kStageBytes = static_cast<uint32_t>(St::kBytes);
      uint32_t g = 0;  // steps issued over the block's tiles: stage g % kStages
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int64_t zz, m0, n0;
        locate(tile, zz, m0, n0);
        const BlockPart part = block_part(p, split, BK, zz);
        [[maybe_unused]] const int za = maps.batched_a ? static_cast<int>(part.z) : 0;
        const int zb = maps.batched_b ? static_cast<int>(part.z) : 0;
        // A convolution's tile starts at output pixel m0: image, and its window's corner.
        int image = 0, corner_h = 0, corner_w = 0;
        if constexpr (Conv) {
          const ConvGeometry& cg = p.conv;
          const int64_t plane = cg.oh * cg.ow, at = m0 % plane;
          image = static_cast<int>(m0 / plane);
          corner_h = static_cast<int>(at / cg.ow) * cg.stride_h - cg.pad_top;
          corner_w = static_cast<int>(at % cg.ow) * cg.stride_w - cg.pad_left;
        }
        for (int t = 0; t < part.steps; ++t, ++g) {
          const uint32_t s = g % kStages;
          // Refilling: the consumers' release of this stage's previous use.
          if (g >= kStages) wgmma::barrier_wait(&empty[s], ((g / kStages) + 1) & 1);
          S* st = stages + s * St::kElems;
          const int k0 = (part.first_step + t) * BK;
          wgmma::barrier_arrive_expect(&full[s], kStageBytes);
          if constexpr (Conv) {
            // The reduction runs over (r, s, c) with c fastest; a step's 64 channels lie in one
            // tap (the launcher took only channel counts that are multiples of 64).
            const int channels = static_cast<int>(p.conv.c);
            const int tap = k0 / channels, tap_r = tap / p.conv.s;
            wgmma::bulk_im2col_4d(st, &maps.a, k0 - tap * channels, corner_w, corner_h, image,
                                  static_cast<uint16_t>((tap - tap_r * p.conv.s) * p.conv.dil_w),
                                  static_cast<uint16_t>(tap_r * p.conv.dil_h), &full[s]);
          } else {
            wgmma::bulk_tensor_3d(st, &maps.a, k0, static_cast<int>(m0), za, &full[s]);
          }
          if constexpr (TB) {
            wgmma::bulk_tensor_3d(st + LA::kElems, &maps.b, k0, static_cast<int>(n0), zb, &full[s]);
          } else {
            KILN_UNROLL
            for (int j = 0; j < BN / LB::kPanelCols; ++j) {
              wgmma::bulk_tensor_3d(st + LA::kElems + j * LB::Panel::kElems, &maps.b,
                                    static_cast<int>(n0) + j * LB::kPanelCols, k0, zb, &full[s]);
            }
          }
        }
      }
    } else {
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
    }
  } else {
    // A consumer: rows 64 (warpgroup - 1).. of each tile.
    if constexpr (kMoveRegisters) wgmma::claim_registers<kConsumerRegs>();
    const int cw = warpgroup - 1;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int wg_thread = static_cast<int>(threadIdx.x) % 128;
    float* const my_staged = staged_acc + cw * 64 * kAccStride;
    constexpr int kOutChunk = TileOutput<T>::kChunk;
    constexpr int kOutChunksPerRow = kEpilogueCols / kOutChunk;
    constexpr int kChunks = 64 * kOutChunksPerRow;
    static_assert(kChunks % 128 == 0);
    uint32_t g = 0;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int64_t zz, m0, n0;
      locate(tile, zz, m0, n0);
      const BlockPart part = block_part(p, split, BK, zz);
      {
        // The warpgroup's rows of the residual asked of L2 before the products.
        TileOutput<T> ahead;
        ahead.init(p, part.z, part.zz, split);
        ahead.template prefetch_c<64, BN, 128>(p, m0 + cw * 64, n0, wg_thread);
      }
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
      // Set up after the products: its registers are not held through them.
      TileOutput<T> out;
      out.init(p, part.z, part.zz, split);
      // Not unrolled: the copy-out's code once, not once a slice (unrolled, the 128 x 256
      // tile's epilogue filled the instruction cache: 37 % of its warps' stall samples waited
      // for instructions; Nsight Compute, 2026-12-06). stage_accumulators branches to the
      // slice's block, whose accumulator indices are constants.
      KILN_NO_UNROLL
      for (int c0 = 0; c0 < BN; c0 += kEpilogueCols) {
        stage_accumulators<BN, kEpilogueCols>(my_staged, acc, p.alpha, c0);
        wgmma::sync_named(kBarWarpgroup0 + cw, 128);
        KILN_UNROLL
        for (int it = 0; it < kChunks / 128; ++it) {
          const int chunk = wg_thread + it * 128;
          const int tr = chunk / kOutChunksPerRow, cc = (chunk % kOutChunksPerRow) * kOutChunk;
          const int64_t row = m0 + cw * 64 + tr, col = n0 + c0 + cc;
          if (row >= p.m || col >= p.n) continue;
          out.store_staged(p, row, col, my_staged + tr * kAccStride + cc);
        }
        // The warpgroup's rows read out before the next slice's or tile's accumulators land.
        wgmma::sync_named(kBarWarpgroup0 + cw, 128);
      }
    }
  }
#endif
}

// A driver entry point `name` (CUDA 12's ABI) from the driver the runtime loaded (the library
// links no libcuda); null where the driver lacks it.
template <typename Fn>
Fn driver_entry(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(f);
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const auto fn = driver_entry<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  return fn;
}

// A tensor map of a float16 operand: `batch` matrices of rows x cols (cols contiguous, rows
// `ld` elements apart, matrices `stride` apart; stride 0: one matrix for every batch entry),
// copied in boxes of box_rows x 64 columns (128 bytes: the 128-byte swizzle) that land in the
// layout SwizzledTile<uint16_t, box_rows, 64> gives. False where the driver refuses it.
bool encode_operand(CUtensorMap& map, int& batched, const void* data, int64_t rows, int64_t cols,
                    int64_t ld, int64_t batch, int64_t stride, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled();
  if (!encode) return false;
  batched = batch > 1 && stride != 0;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batched ? batch : 1)};
  // Byte strides of dimensions 1 and 2 (16-byte multiples: operands_aligned checked the rows).
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * 2,
                                 static_cast<cuuint64_t>(batched ? stride : rows * ld) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t steps[3] = {1, 1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<void*>(data), dims, strides,
                box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

PFN_cuTensorMapEncodeIm2col_v12000 encode_im2col() {
  static const auto fn =
      driver_entry<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
  return fn;
}

// The im2col tensor map of an implicit convolution's channels-last input (p.conv: `images` of
// h x w x c float16): boxes of kWgBM output pixels x 64 channels (128 bytes: the 128-byte
// swizzle, the layout the tiled A box lands in). The bounding box is the filter's first tap's
// window corners over the output: from -pads to the last output position's corner, walked at the
// convolution's strides; the tap's offsets shift it. False where the convolution does not fit
// the map (channels not a multiple of 64, corners, strides or offsets past what im2col mode
// encodes) or the driver refuses it.
bool encode_conv_input(CUtensorMap& map, const GemmArgs& p) {
  const ConvGeometry& g = p.conv;
  const PFN_cuTensorMapEncodeIm2col_v12000 encode = encode_im2col();
  if (!encode || g.c % kWgBK != 0 || g.oh <= 0 || g.ow <= 0 || p.m % (g.oh * g.ow) != 0) {
    return false;
  }
  const int64_t images = p.m / (g.oh * g.ow);
  const int64_t upper_h = (g.oh - 1) * g.stride_h - g.pad_top - (g.h - 1);
  const int64_t upper_w = (g.ow - 1) * g.stride_w - g.pad_left - (g.w - 1);
  // A 4-d map's corners are 8-bit signed, its offsets 8-bit unsigned, its strides at most 8.
  auto corner = [](int64_t v) { return v >= -128 && v <= 127; };
  if (!corner(-g.pad_top) || !corner(-g.pad_left) || !corner(upper_h) || !corner(upper_w) ||
      (g.r - 1) * g.dil_h > 255 || (g.s - 1) * g.dil_w > 255 || g.stride_h > 8 || g.stride_w > 8 ||
      g.stride_h < 1 || g.stride_w < 1) {
    return false;
  }
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(g.c), static_cast<cuuint64_t>(g.w),
                              static_cast<cuuint64_t>(g.h), static_cast<cuuint64_t>(images)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(g.c) * 2,
                                 static_cast<cuuint64_t>(g.w * g.c) * 2,
                                 static_cast<cuuint64_t>(g.h * g.w * g.c) * 2};
  const int lower[2] = {static_cast<int>(-g.pad_left), static_cast<int>(-g.pad_top)};
  const int upper[2] = {static_cast<int>(upper_w), static_cast<int>(upper_h)};
  const cuuint32_t steps[4] = {1, static_cast<cuuint32_t>(g.stride_w),
                               static_cast<cuuint32_t>(g.stride_h), 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(p.a), dims, strides,
                lower, upper, kWgBK, kWgBM, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int BN, bool TB, bool Conv, bool Tma>
hipError_t launch_ws_tile(const GemmArgs& p, SplitK split, hipStream_t stream) {
  const int64_t tiles = ((p.m + kWgBM - 1) / kWgBM) * ((p.n + BN - 1) / BN) * p.batch * split.count;
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : tiles;
  const int64_t blocks = tiles < sms ? tiles : sms;
  if (blocks <= 0 || blocks > INT_MAX) return hipErrorInvalidValue;
  TensorMaps maps{};
  if constexpr (Tma) {
    // The tensor coordinates are 32-bit.
    if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX || p.batch > INT_MAX) {
      return launch_ws_tile<BN, TB, Conv, false>(p, split, stream);
    }
    const bool encoded =
        (Conv ? encode_conv_input(maps.a, p)
              : encode_operand(maps.a, maps.batched_a, p.a, p.m, p.k, p.k, p.batch, p.stride_a,
                               kWgBM)) &&
        (TB ? encode_operand(maps.b, maps.batched_b, p.b, p.n, p.k, p.k, p.batch, p.stride_b, BN)
            : encode_operand(maps.b, maps.batched_b, p.b, p.k, p.n, p.n, p.batch, p.stride_b,
                             kWgBK));
    // A driver without tensor maps (or one that refuses these): the same tile, copied by
    // cp.async.
    if (!encoded) return launch_ws_tile<BN, TB, Conv, false>(p, split, stream);
  }
  auto* kernel = &wgmma_ws_kernel<BN, TB, Conv, Tma>;
  static unsigned long long devices_done = 0;
  constexpr size_t kBytes = WsShape<BN>::kBytes;
  const hipError_t allowed =
      allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kBytes, devices_done);
  if (allowed != hipSuccess) return allowed;
  hipLaunchKernelGGL(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWsThreads), kBytes, stream,
                     p, split, maps);
  return hipGetLastError();
}

// Tma: the bulk-copy producer where it can take the product (a convolution's A in im2col
// mode), else the cp.async one.
template <int BN, bool Tma>
hipError_t launch_ws_width(const GemmArgs& p, SplitK split, hipStream_t stream) {
  if (p.conv_a) return launch_ws_tile<BN, true, true, Tma>(p, split, stream);
  return p.trans_b ? launch_ws_tile<BN, true, false, Tma>(p, split, stream)
                   : launch_ws_tile<BN, false, false, Tma>(p, split, stream);
}

}  // namespace

hipError_t launch_f16_wgmma_ws(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  if (p.trans_a) return hipErrorInvalidValue;
  switch (tile) {
    case TileId::Specialized128:
      return launch_ws_width<128, false>(p, split, stream);
    case TileId::Bulk128:
      return launch_ws_width<128, true>(p, split, stream);
    case TileId::Bulk256:
      return launch_ws_width<256, true>(p, split, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace kiln::backends::gpu::kernels::gemm_impl
