#pragma once
// The kernel of Kiln's own GEMM (launch_gemm, gemm.hip), shared by the sources that instantiate
// it (gemm_f32.hip, gemm_f16.hip, gemm_f16_fma.hip: one per tile op, so that the compilers run
// them in parallel and each AMD target compiles only what it launches). Device code: included
// by .hip files only.
//
// A block computes a BM x BN tile of Y = act(alpha op(A) op(B) + beta C). The reduction runs
// in steps of BK through a ring of kStages shared-memory stages: the copies of step t + kStages
// - 1 are in flight (cp.async on NVIDIA) while step t is multiplied, one barrier per step.
// Staging copies rows as they lie in global memory (16-byte chunks where every row is aligned,
// single elements otherwise), so a transposed operand is only another shared-memory view; the
// stages are swizzled (SwizzledTile) rather than padded. Each wavefront multiplies a WM x WN
// part of the tile with the target's tile op (mma_tile.hpp: mma.sync with ldmatrix loads on
// NVIDIA, MFMA on CDNA, FMA otherwise), TM x TN op tiles of accumulators per lane. The epilogue
// (alpha, beta C or a bias, the activation, one rounding) runs from the accumulators into a
// shared-memory tile of Y, which the block then writes out row by row in 16-byte stores.
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/epilogue.hpp"
#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/kernels/mma_tile.hpp"
#include "backends/gpu/kernels/tile_copy.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {

// A block tile: BM x BN outputs from kThreads threads, BK of the reduction per stage, and the
// blocks that should fit on one multiprocessor (NVIDIA's launch bound: registers are capped so
// that they do; a product of small K is one short pipeline per block, whose latency only other
// blocks on the multiprocessor hide).
template <int M, int N, int K, int Threads, int Stages, int MinBlocks>
struct BlockTile {
  static constexpr int BM = M, BN = N, BK = K, kThreads = Threads, kStages = Stages;
  static constexpr int kMinBlocks = MinBlocks;
};

// The tiles launch_gemm chooses from (choose_tile, gemm.hip). Big: 8 NVIDIA warps of 64 x 32;
// Mid and Small: 4 warps of 64 x 32 and 32 x 32. AMD takes Big and Small only (fewer kernels
// to compile for four targets), with two stages: its copies are synchronous, further stages
// would only cost LDS.
enum class TileId { Big, Mid, Small };
#if defined(__HIP__)
constexpr bool kMidTile = false;
constexpr int kF16Stages = 2, kF16BigStages = 2;
#else
constexpr bool kMidTile = true;
constexpr int kF16Stages = 4, kF16BigStages = 3;  // 48 KiB of static shared memory at most
#endif
struct F16Tiles {
  using Big = BlockTile<128, 128, 32, 256, kF16BigStages, 1>;
  using Mid = BlockTile<128, 64, 32, 128, kF16Stages, 3>;
  using Small = BlockTile<64, 64, 32, 128, kF16Stages, 3>;
};
struct F32Tiles {
  using Big = BlockTile<128, 128, 16, 256, 2, 1>;
  using Mid = BlockTile<128, 64, 16, 128, 3, 2>;
  using Small = BlockTile<64, 64, 16, 128, 3, 4>;
};

// HIP's second launch bound means something else (waves per execution unit): AMD gets the
// thread count alone.
#if defined(__HIP__)
#define KILN_GEMM_LAUNCH_BOUNDS(Tile) __launch_bounds__(Tile::kThreads)
#else
#define KILN_GEMM_LAUNCH_BOUNDS(Tile) __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
#endif

template <size_t N>
struct alignas(16) SmemBytes {
  unsigned char bytes[N];
};

// Which tile op a kernel multiplies with. A kernel's template arguments must name the same
// kernel in every compiler pass (the host's and each target's), and MatrixTileF16 differs by
// target, so kernels name the kind and resolve the op inside.
enum class TileKind { Matrix, Fma };
template <TileKind Kind, typename S>
struct TileOpOf {
  using type = FmaTile<S>;
};
template <>
struct TileOpOf<TileKind::Matrix, uint16_t> {
  using type = MatrixTileF16;
};

// Whether the target being compiled launches this kind of kernel: the runtime takes matrix
// tiles for 16-bit inputs exactly where the target has them (has_matrix_tiles,
// own_gemm_kernels.cpp), so on AMD the other kind's kernels keep an empty body (every pass
// must still see every kernel; only device code is saved). The host pass and NVIDIA, which
// launch no fp16 FMA kernel (gemm.hip), keep every body.
#if defined(__HIP_DEVICE_COMPILE__)
template <TileKind Kind, typename S>
constexpr bool kRunsHere = sizeof(S) != 2 ||
                           (Kind == TileKind::Matrix) == !is_fma_tile<MatrixTileF16>;
#else
template <TileKind Kind, typename S>
constexpr bool kRunsHere = true;
#endif

__device__ inline float activate(float x, const GemmArgs& p) {
  return apply_activation(p.activation, x, p.act_alpha, p.act_beta);
}

// Issues the copies of one operand's tile for a step: storage rows row0.. (of row_extent) and
// columns col0.. (of col_extent) of the operand at `p` with leading dimension `ld`, into the
// swizzled stage L; zeros outside the operand. V: elements per copy, 16 bytes (every row
// aligned, so col_extent = ld is a multiple of V: a chunk lies wholly inside or outside) or 1.
template <typename S, int V, int Threads, typename L>
__device__ inline void stage_operand(S* smem, const S* p, int64_t ld, int64_t row_extent,
                                     int64_t col_extent, int64_t row0, int64_t col0) {
  constexpr int kChunksPerRow = L::kCols / V;
  constexpr int kPerThread = L::kRows * kChunksPerRow / Threads;
  static_assert(L::kCols % V == 0 && L::kRows * kChunksPerRow % Threads == 0);
  if constexpr (V * sizeof(S) == 16) {
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int chunk = static_cast<int>(threadIdx.x) + i * Threads;
      const int r = chunk / kChunksPerRow, c = (chunk % kChunksPerRow) * V;
      const int64_t row = row0 + r, col = col0 + c;
      S* dst = smem + L::offset(r, c);
      if (row < row_extent && col < col_extent) {
        copy_async_16(dst, p + row * ld + col);
      } else {
        copy_16(dst, Bytes16{});
      }
    }
  } else {
    // Element by element, not unrolled: these loads would all be in flight at once, their
    // registers beside the accumulators (the aligned kernel's spills).
    KILN_NO_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int chunk = static_cast<int>(threadIdx.x) + i * Threads;
      const int r = chunk / kChunksPerRow, c = chunk % kChunksPerRow;
      const int64_t row = row0 + r, col = col0 + c;
      smem[L::offset(r, c)] = row < row_extent && col < col_extent ? p[row * ld + col] : S(0);
    }
  }
}

template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB>
__device__ inline void gemm_block(const GemmArgs& p, bool vec) {
  using Op = typename TileOpOf<Kind, S>::type;
  static_assert(sizeof(typename Op::In) == sizeof(S));
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK;
  constexpr int kThreads = Tile::kThreads, kStages = Tile::kStages;
  // The wavefronts of the block in a 2 x (W / 2) grid, each with a TM x TN grid of op tiles.
  constexpr int kWarps = kThreads / KILN_WARP_SIZE;
  constexpr int kWarpsM = 2, kWarpsN = kWarps / kWarpsM;
  constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;
  constexpr int TM = WM / Op::kM, TN = WN / Op::kN;
  static_assert(kWarpsN >= 1 && TM >= 1 && TN >= 1 && WM % Op::kM == 0 && WN % Op::kN == 0 &&
                BK % Op::kK == 0 && kStages >= 2);
  // A is k-contiguous unless transposed ([m][k] rows, else [k][m]); B only when transposed.
  using LA = SwizzledTile<S, TA ? BK : BM, TA ? BM : BK>;
  using LB = SwizzledTile<S, TB ? BN : BK, TB ? BK : BN>;
  constexpr int kStageElems = LA::kElems + LB::kElems;
  constexpr size_t kPipeBytes = size_t{kStages} * kStageElems * sizeof(S);
  // Y's tile staged for the stores, rows padded by 16 bytes (the accumulators' scattered
  // writes spread over the banks), where it fits in the stages' memory; else stored directly.
  constexpr int kOutChunk = 16 / static_cast<int>(sizeof(T));
  constexpr int kOutStride = BN + kOutChunk;
  constexpr bool kStagedOut =
      size_t{BM} * kOutStride * sizeof(T) <= kPipeBytes && BM * (BN / kOutChunk) % kThreads == 0;
  __shared__ SmemBytes<kPipeBytes> smem;
  S* const stages = reinterpret_cast<S*>(smem.bytes);

  const int warp = static_cast<int>(threadIdx.x) / KILN_WARP_SIZE;
  const int lane = static_cast<int>(threadIdx.x) % KILN_WARP_SIZE;
  const int wm0 = (warp / kWarpsN) * WM, wn0 = (warp % kWarpsN) * WN;
  const int64_t z = blockIdx.z;
  const S* a = static_cast<const S*>(p.a) + z * p.stride_a;
  const S* b = static_cast<const S*>(p.b) + z * p.stride_b;
  const T* c = p.c ? static_cast<const T*>(p.c) + z * p.c_batch_stride : nullptr;
  T* y = static_cast<T*>(p.y) + z * p.m * p.n;
  const int64_t lda = TA ? p.m : p.k, ldb = TB ? p.k : p.n;
  constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t m_tiles = (p.m + BM - 1) / BM;
  const int steps = static_cast<int>((p.k + BK - 1) / BK);

  for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
    const int64_t m0 = mt * BM;
    // Step `step`'s copies into its stage of the ring, V elements per copy.
    auto issue_v = [&]<int V>(int step) {
      S* st = stages + (step % kStages) * kStageElems;
      const int64_t k0 = int64_t{step} * BK;
      if constexpr (TA) {
        stage_operand<S, V, kThreads, LA>(st, a, lda, p.k, p.m, k0, m0);
      } else {
        stage_operand<S, V, kThreads, LA>(st, a, lda, p.m, p.k, m0, k0);
      }
      if constexpr (TB) {
        stage_operand<S, V, kThreads, LB>(st + LA::kElems, b, ldb, p.n, p.k, n0, k0);
      } else {
        stage_operand<S, V, kThreads, LB>(st + LA::kElems, b, ldb, p.k, p.n, k0, n0);
      }
    };
    // The alignment is a run-time switch (the same for the whole launch), not a template
    // argument: one kernel instead of two per tile and transpose halves what the compilers
    // build (four AMD targets), and the multiply loop is the same for both.
    auto issue = [&](int step) {
      if (vec) {
        issue_v.template operator()<kVec>(step);
      } else {
        issue_v.template operator()<1>(step);
      }
    };
    float acc[TM][TN][Op::kAcc];
    KILN_UNROLL
    for (int i = 0; i < TM; ++i) {
      KILN_UNROLL
      for (int j = 0; j < TN; ++j) {
        KILN_UNROLL
        for (int e = 0; e < Op::kAcc; ++e) acc[i][j][e] = 0.f;
      }
    }
    // One commit per step (empty past the end), so that waiting for all but kStages - 2
    // groups always means "step t has landed".
    KILN_UNROLL
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < steps) issue(s);
      copy_async_commit();
    }
    for (int t = 0; t < steps; ++t) {
      copy_async_wait<kStages - 2>();
      // Step t visible to every thread, and every warp done with step t - 1, whose stage the
      // next copies overwrite.
      __syncthreads();
      if (t + kStages - 1 < steps) issue(t + kStages - 1);
      copy_async_commit();
      const S* st = stages + (t % kStages) * kStageElems;
      const SwizzledOperand<S, LA, !TA> va{st};
      const SwizzledOperand<S, LB, TB> vb{st + LA::kElems};
      KILN_UNROLL
      for (int kk = 0; kk < BK; kk += Op::kK) {
        typename Op::FragA fa[TM];
        typename Op::FragB fb[TN];
        KILN_UNROLL
        for (int i = 0; i < TM; ++i) Op::load_a(fa[i], va, wm0 + i * Op::kM, kk, lane);
        KILN_UNROLL
        for (int j = 0; j < TN; ++j) Op::load_b(fb[j], vb, wn0 + j * Op::kN, kk, lane);
        KILN_UNROLL
        for (int i = 0; i < TM; ++i) {
          KILN_UNROLL
          for (int j = 0; j < TN; ++j) Op::mma(acc[i][j], fa[i], fb[j]);
        }
      }
    }
    copy_async_wait<0>();
    // Every warp done with the stages before Y's tile (or the next tile's copies) takes them.
    __syncthreads();
    KILN_UNROLL
    for (int i = 0; i < TM; ++i) {
      KILN_UNROLL
      for (int j = 0; j < TN; ++j) {
        KILN_UNROLL
        for (int e = 0; e < Op::kAcc; ++e) {
          int r, col_in_tile;
          Op::acc_coord(lane, e, r, col_in_tile);
          const int tr = wm0 + i * Op::kM + r, tc = wn0 + j * Op::kN + col_in_tile;
          const int64_t row = m0 + tr, col = n0 + tc;
          const bool inside = row < p.m && col < p.n;
          if (!kStagedOut && !inside) continue;
          float v = p.alpha * acc[i][j][e];
          if (c && inside) v += p.beta * to_float(c[row * p.c_row_stride + col * p.c_col_stride]);
          if constexpr (kStagedOut) {
            reinterpret_cast<T*>(smem.bytes)[tr * kOutStride + tc] = from_float<T>(activate(v, p));
          } else {
            y[row * p.n + col] = from_float<T>(activate(v, p));
          }
        }
      }
    }
    if constexpr (kStagedOut) {
      __syncthreads();
      const T* out = reinterpret_cast<const T*>(smem.bytes);
      const bool y_vec = p.n % kOutChunk == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
      constexpr int kChunksPerRow = BN / kOutChunk;
      KILN_UNROLL
      for (int i = 0; i < BM * kChunksPerRow / kThreads; ++i) {
        const int chunk = static_cast<int>(threadIdx.x) + i * kThreads;
        const int r = chunk / kChunksPerRow, cc = (chunk % kChunksPerRow) * kOutChunk;
        const int64_t row = m0 + r, col = n0 + cc;
        if (row >= p.m) continue;
        const T* src = out + r * kOutStride + cc;
        T* dst = y + row * p.n + col;
        if (y_vec && col + kOutChunk <= p.n) {
          copy_16(dst, src);
        } else {
          for (int e = 0; e < kOutChunk && col + e < p.n; ++e) dst[e] = src[e];
        }
      }
      // Y's tile read out before the next tile's copies land in the same memory.
      __syncthreads();
    }
  }
}

// Kind: the tile op (mma_tile.hpp); S: what shared memory holds (uint16_t: fp16 bits, or float);
// T: the element type of C and Y; TA / TB: transposes; vec: every row of A and B 16-byte
// aligned (16-byte staging copies, else element by element).
template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB>
__global__ void KILN_GEMM_LAUNCH_BOUNDS(Tile) gemm_kernel(GemmArgs p, bool vec) {
  if constexpr (kRunsHere<Kind, S>) gemm_block<Kind, S, T, Tile, TA, TB>(p, vec);
}

template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB>
hipError_t launch_tile(const GemmArgs& p, bool vec, hipStream_t stream) {
  const int64_t n_tiles = (p.n + Tile::BN - 1) / Tile::BN;
  const int64_t m_tiles = (p.m + Tile::BM - 1) / Tile::BM;
  if (n_tiles > INT_MAX || p.batch > 65535) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>(m_tiles < 65535 ? m_tiles : 65535),
                  static_cast<unsigned>(p.batch));
  auto* kernel = &gemm_kernel<Kind, S, T, Tile, TA, TB>;
  hipLaunchKernelGGL(kernel, grid, dim3(Tile::kThreads), 0, stream, p, vec);
  return hipGetLastError();
}

// Both operands take 16-byte staging copies when every row of both starts 16-byte aligned.
inline bool aligned(const void* ptr, int64_t ld, int64_t batch_stride, int64_t batch, int elems) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % elems == 0 &&
         (batch == 1 || batch_stride % elems == 0);
}

// One tile op's kernels for `tile` (Tiles: F16Tiles or F32Tiles), by transposes and alignment.
template <TileKind Kind, typename S, typename T, typename Tiles>
hipError_t launch_op(const GemmArgs& p, TileId tile, hipStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  const bool vec = aligned(p.a, p.trans_a ? p.m : p.k, p.stride_a, p.batch, kVec) &&
                   aligned(p.b, p.trans_b ? p.k : p.n, p.stride_b, p.batch, kVec);
  auto by_tile = [&]<bool TA, bool TB>() {
    if constexpr (kMidTile) {
      if (tile == TileId::Mid) {
        return launch_tile<Kind, S, T, typename Tiles::Mid, TA, TB>(p, vec, stream);
      }
    }
    return tile == TileId::Big
               ? launch_tile<Kind, S, T, typename Tiles::Big, TA, TB>(p, vec, stream)
               : launch_tile<Kind, S, T, typename Tiles::Small, TA, TB>(p, vec, stream);
  };
  if (p.trans_a) {
    return p.trans_b ? by_tile.template operator()<true, true>()
                     : by_tile.template operator()<true, false>();
  }
  return p.trans_b ? by_tile.template operator()<false, true>()
                   : by_tile.template operator()<false, false>();
}

// The launchers of each tile op, one source file each.
hipError_t launch_f32(const GemmArgs& p, TileId tile, hipStream_t stream);
hipError_t launch_f16_matrix(const GemmArgs& p, TileId tile, hipStream_t stream);
hipError_t launch_f16_fma(const GemmArgs& p, TileId tile, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels::gemm_impl
