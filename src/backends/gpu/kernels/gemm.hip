// Kiln's own GEMM: Y = act(alpha op(A) op(B) + beta C) for any M, N, K, batched, with both
// transposes. A block of 256 threads computes a BM x BN tile of Y; each step stages BK of the
// reduction of both operands in shared memory, double-buffered (the next step's tiles are read
// from global memory into registers while this step's are multiplied, then stored to the other
// buffer: one barrier per step). Staging copies rows as they lie in global memory (16-byte
// chunks where rows are aligned, single elements otherwise), so a transposed operand is only
// another shared-memory view (SmemOperand). Each wavefront multiplies its part of the tile with
// the target's tile op (mma_tile.hpp: mma.sync on NVIDIA, MFMA on CDNA, FMA otherwise); the
// epilogue (alpha, beta C or a bias, the activation, one rounding) runs from the accumulators.
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/epilogue.hpp"
#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/kernels/mma_tile.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

constexpr int kThreads = 256;

// A block tile: BM x BN outputs, BK of the reduction staged per step.
template <int M, int N, int K>
struct BlockTile {
  static constexpr int BM = M, BN = N, BK = K;
};
using BigF16 = BlockTile<128, 128, 32>;
using SmallF16 = BlockTile<64, 64, 32>;
using BigF32 = BlockTile<128, 128, 16>;
using SmallF32 = BlockTile<64, 64, 16>;

// What a thread moves per staging load: 16 bytes where rows are aligned (V > 1), else one element.
template <typename S, int V>
struct alignas(sizeof(S) * V) Chunk {
  S v[V];
};

// One operand's staged tile in shared memory: kRows rows of kCols elements, the rows running
// along the operand's contiguous dim in global memory (k for A and for a transposed B), padded
// by 16 bytes so that the tile ops' loads spread over the banks and rows stay 16-byte aligned.
template <typename S, int MN, int BK, bool KContiguous>
struct StagedLayout {
  static constexpr int kCols = KContiguous ? BK : MN;
  static constexpr int kRows = KContiguous ? MN : BK;
  static constexpr int kStride = kCols + 16 / static_cast<int>(sizeof(S));
  static constexpr int kElems = kRows * kStride;
};

// Reads one operand's tile for a step into registers, and stores them into shared memory.
template <typename S, int V, int MN, int BK, bool KContiguous>
struct Stager {
  using L = StagedLayout<S, MN, BK, KContiguous>;
  static constexpr int kChunksPerRow = L::kCols / V;
  static constexpr int kPerThread = L::kRows * kChunksPerRow / kThreads;
  static_assert(L::kCols % V == 0 && L::kRows * kChunksPerRow % kThreads == 0);
  Chunk<S, V> regs[kPerThread];

  // The tile whose corner is (mn0, k0) of the operand at `p` with leading dimension `ld`
  // (extents mn_extent x k_extent); zeros outside it.
  __device__ void load(const S* p, int64_t ld, int64_t mn_extent, int64_t k_extent, int64_t mn0,
                       int64_t k0) {
    const int64_t row_extent = KContiguous ? mn_extent : k_extent;
    const int64_t col_extent = KContiguous ? k_extent : mn_extent;
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int chunk = static_cast<int>(threadIdx.x) + i * kThreads;
      const int64_t row = (KContiguous ? mn0 : k0) + chunk / kChunksPerRow;
      const int64_t col = (KContiguous ? k0 : mn0) + (chunk % kChunksPerRow) * V;
      if (row < row_extent && col + V <= col_extent) {
        regs[i] = *reinterpret_cast<const Chunk<S, V>*>(p + row * ld + col);
      } else {
        KILN_UNROLL
        for (int e = 0; e < V; ++e) {
          regs[i].v[e] = (row < row_extent && col + e < col_extent) ? p[row * ld + col + e] : S(0);
        }
      }
    }
  }
  __device__ void store(S* smem) const {
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int chunk = static_cast<int>(threadIdx.x) + i * kThreads;
      const int row = chunk / kChunksPerRow, col = (chunk % kChunksPerRow) * V;
      *reinterpret_cast<Chunk<S, V>*>(smem + row * L::kStride + col) = regs[i];
    }
  }
};

__device__ inline float activate(float x, const GemmArgs& p) {
  return apply_activation(p.activation, x, p.act_alpha, p.act_beta);
}

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

// Kind: the tile op (mma_tile.hpp); S: what shared memory holds (uint16_t: fp16 bits, or float);
// T: the element type of C and Y; TA / TB: transposes; V: elements per staging load.
template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB, int V>
__global__ void __launch_bounds__(kThreads) gemm_kernel(GemmArgs p) {
  using Op = typename TileOpOf<Kind, S>::type;
  static_assert(sizeof(typename Op::In) == sizeof(S));
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK;
  // The wavefronts of the block in a 2 x (W / 2) grid, each with a TM x TN grid of op tiles.
  constexpr int kWarps = kThreads / KILN_WARP_SIZE;
  constexpr int kWarpsM = 2, kWarpsN = kWarps / kWarpsM;
  constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;
  constexpr int TM = WM / Op::kM, TN = WN / Op::kN;
  static_assert(TM >= 1 && TN >= 1 && WM % Op::kM == 0 && WN % Op::kN == 0 && BK % Op::kK == 0);
  // A is k-contiguous unless transposed; B only when transposed ([n, k]).
  using LA = StagedLayout<S, BM, BK, !TA>;
  using LB = StagedLayout<S, BN, BK, TB>;
  struct alignas(16) Stage {
    S a[LA::kElems];
    S b[LB::kElems];
  };
  __shared__ Stage stages[2];

  const int warp = static_cast<int>(threadIdx.x) / KILN_WARP_SIZE;
  const int lane = static_cast<int>(threadIdx.x) % KILN_WARP_SIZE;
  const int wm0 = (warp / kWarpsN) * WM, wn0 = (warp % kWarpsN) * WN;
  const int64_t z = blockIdx.z;
  const S* a = static_cast<const S*>(p.a) + z * p.stride_a;
  const S* b = static_cast<const S*>(p.b) + z * p.stride_b;
  const T* c = p.c ? static_cast<const T*>(p.c) + z * p.c_batch_stride : nullptr;
  T* y = static_cast<T*>(p.y) + z * p.m * p.n;
  const int64_t lda = TA ? p.m : p.k, ldb = TB ? p.k : p.n;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t m_tiles = (p.m + BM - 1) / BM;
  const int steps = static_cast<int>((p.k + BK - 1) / BK);
  Stager<S, V, BM, BK, !TA> stage_a;
  Stager<S, V, BN, BK, TB> stage_b;

  for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
    const int64_t m0 = mt * BM;
    float acc[TM][TN][Op::kAcc];
    KILN_UNROLL
    for (int i = 0; i < TM; ++i) {
      KILN_UNROLL
      for (int j = 0; j < TN; ++j) {
        KILN_UNROLL
        for (int e = 0; e < Op::kAcc; ++e) acc[i][j][e] = 0.f;
      }
    }
    if (steps > 0) {
      stage_a.load(a, lda, p.m, p.k, m0, 0);
      stage_b.load(b, ldb, p.n, p.k, n0, 0);
      stage_a.store(stages[0].a);
      stage_b.store(stages[0].b);
    }
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
      const bool more = t + 1 < steps;
      if (more) {
        stage_a.load(a, lda, p.m, p.k, m0, int64_t{t + 1} * BK);
        stage_b.load(b, ldb, p.n, p.k, n0, int64_t{t + 1} * BK);
      }
      const Stage& s = stages[t & 1];
      const SmemOperand<S, !TA> va{s.a, LA::kStride};
      const SmemOperand<S, TB> vb{s.b, LB::kStride};
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
      if (more) {
        stage_a.store(stages[(t + 1) & 1].a);
        stage_b.store(stages[(t + 1) & 1].b);
      }
      __syncthreads();
    }
    KILN_UNROLL
    for (int i = 0; i < TM; ++i) {
      KILN_UNROLL
      for (int j = 0; j < TN; ++j) {
        KILN_UNROLL
        for (int e = 0; e < Op::kAcc; ++e) {
          int r, col_in_tile;
          Op::acc_coord(lane, e, r, col_in_tile);
          const int64_t row = m0 + wm0 + i * Op::kM + r;
          const int64_t col = n0 + wn0 + j * Op::kN + col_in_tile;
          if (row >= p.m || col >= p.n) continue;
          float v = p.alpha * acc[i][j][e];
          if (c) v += p.beta * to_float(c[row * p.c_row_stride + col * p.c_col_stride]);
          y[row * p.n + col] = from_float<T>(activate(v, p));
        }
      }
    }
  }
}

template <typename Tile>
int64_t tiles(const GemmArgs& p) {
  return ((p.m + Tile::BM - 1) / Tile::BM) * ((p.n + Tile::BN - 1) / Tile::BN) * p.batch;
}

// The big tile once it fills every multiprocessor; below that, the small one (more blocks).
template <typename Big>
bool use_big(const GemmArgs& p) {
  return tiles<Big>(p) >= p.multiprocessors;
}

template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB, int V>
hipError_t launch_tile(const GemmArgs& p, hipStream_t stream) {
  const int64_t n_tiles = (p.n + Tile::BN - 1) / Tile::BN;
  const int64_t m_tiles = (p.m + Tile::BM - 1) / Tile::BM;
  if (n_tiles > INT_MAX || p.batch > 65535) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>(m_tiles < 65535 ? m_tiles : 65535),
                  static_cast<unsigned>(p.batch));
  auto* kernel = &gemm_kernel<Kind, S, T, Tile, TA, TB, V>;
  hipLaunchKernelGGL(kernel, grid, dim3(kThreads), 0, stream, p);
  return hipGetLastError();
}

// Both operands take 16-byte staging loads when every row of both starts 16-byte aligned.
bool aligned(const void* ptr, int64_t ld, int64_t batch_stride, int64_t batch, int elems) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % elems == 0 &&
         (batch == 1 || batch_stride % elems == 0);
}

template <TileKind Kind, typename S, typename T, typename Big, typename Small>
hipError_t launch_op(const GemmArgs& p, hipStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  const bool vec = aligned(p.a, p.trans_a ? p.m : p.k, p.stride_a, p.batch, kVec) &&
                   aligned(p.b, p.trans_b ? p.k : p.n, p.stride_b, p.batch, kVec);
  const bool big = use_big<Big>(p);
  auto by_tile = [&]<bool TA, bool TB, int V>() {
    return big ? launch_tile<Kind, S, T, Big, TA, TB, V>(p, stream)
               : launch_tile<Kind, S, T, Small, TA, TB, V>(p, stream);
  };
  auto by_vec = [&]<bool TA, bool TB>() {
    return vec ? by_tile.template operator()<TA, TB, kVec>()
               : by_tile.template operator()<TA, TB, 1>();
  };
  if (p.trans_a) {
    return p.trans_b ? by_vec.template operator()<true, true>()
                     : by_vec.template operator()<true, false>();
  }
  return p.trans_b ? by_vec.template operator()<false, true>()
                   : by_vec.template operator()<false, false>();
}

// Every NVIDIA arch the library is built for (sm_80+) has mma.sync: no FMA tiles for fp16 there.
#if defined(__CUDACC__)
constexpr bool kF16FmaTiles = false;
#else
constexpr bool kF16FmaTiles = true;
#endif

}  // namespace

const char* gemm_tile_name(const GemmArgs& args) {
  if (args.type == FloatType::F16) return use_big<BigF16>(args) ? "128x128x32" : "64x64x32";
  return use_big<BigF32>(args) ? "128x128x16" : "64x64x16";
}

hipError_t launch_gemm(const GemmArgs& p, hipStream_t stream) {
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return hipSuccess;
  switch (p.type) {
    case FloatType::F32:
      return launch_op<TileKind::Fma, float, float, BigF32, SmallF32>(p, stream);
    case FloatType::F16:
      if (p.matrix_tiles) {
        return launch_op<TileKind::Matrix, uint16_t, __half, BigF16, SmallF16>(p, stream);
      }
      if constexpr (kF16FmaTiles) {
        return launch_op<TileKind::Fma, uint16_t, __half, BigF16, SmallF16>(p, stream);
      }
      return hipErrorInvalidValue;
    case FloatType::BF16:
      break;
  }
  return hipErrorInvalidValue;
}

}  // namespace kiln::backends::gpu::kernels
