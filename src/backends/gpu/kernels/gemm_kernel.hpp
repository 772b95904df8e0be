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
// their sources and places set up once per output tile; single elements otherwise), so a
// transposed operand is only another shared-memory view; the stages are swizzled
// (SwizzledTile) rather than padded. Each wavefront multiplies a WM x WN part of the tile with
// the target's tile op (mma_tile.hpp: mma.sync with ldmatrix loads on NVIDIA, MFMA on CDNA, FMA
// otherwise), TM x TN op tiles of accumulators per lane. The epilogue stages alpha times the
// accumulators in float32 through the stages' memory (in slices where the tile does not fit),
// and the block writes each slice out in 16-byte stores, adding beta C (or a bias) and the
// activation on the way and rounding once.
#include <climits>
#include <cstdint>
#include <type_traits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/epilogue.hpp"
#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/kernels/mma_tile.hpp"
#include "backends/gpu/kernels/tile_copy.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {

// A block tile: BM x BN outputs from kThreads threads in a WarpsM x (warps / WarpsM) grid of
// wavefronts, BK of the reduction per stage, and the blocks that should fit on one
// multiprocessor (NVIDIA's launch bound: registers are capped so that they do; a product of
// small K is one short pipeline per block, whose latency only other blocks on the
// multiprocessor hide). A ring of stages past 48 KiB is dynamic shared memory (NVIDIA only:
// AMD's LDS holds 64 KiB a workgroup, and such tiles are not built there).
template <int M, int N, int K, int Threads, int Stages, int MinBlocks, int WarpsM = 2>
struct BlockTile {
  static constexpr int BM = M, BN = N, BK = K, kThreads = Threads, kStages = Stages;
  // At most the block's wavefronts (a 64-thread tile is one wavefront of 64 lanes).
  static constexpr int kMinBlocks = MinBlocks;
  static constexpr int kWarpsM =
      WarpsM <= Threads / KILN_WARP_SIZE ? WarpsM : Threads / KILN_WARP_SIZE;
};

// The tiles launch_gemm chooses from (choose_tile, gemm.hip). Big: 8 NVIDIA warps of 64 x 32;
// Mid and Small: 4 warps of 64 x 32 and 32 x 32. NVIDIA's float16 takes Deep instead of Big:
// Big's warps over BK 64 (half the barriers per product) in 96 KiB of dynamic shared memory,
// two blocks per multiprocessor; measured 2-13 % faster than Big on the products Big took
// (bench/results/2026-12-04b-gpu-own-conv.md; Big with two blocks, registers capped at 128,
// and a 128 x 256 tile of 64 x 64 warps were slower). AMD takes Big and Small only (fewer
// kernels to compile for four targets; its LDS holds 64 KiB a workgroup), with two stages: its
// copies are synchronous, further stages would only cost LDS.
// Warpgroup64/128/256: NVIDIA sm_90's 128 x N tiles on wgmma (gemm_f16_wgmma.cu), one block a
// multiprocessor with a deep ring; Warpgroup64Pair / Warpgroup128Pair: the same tiles with a
// short ring, two blocks a multiprocessor, so that one block's epilogue and first copies overlap
// the other's products (what a short reduction needs); Specialized128: a producer warpgroup
// copying for two multiplying ones, a persistent grid (gemm_f16_wgmma_ws.cu); Bulk128: the
// same with Hopper's bulk tensor copies (TMA) for plain products.
enum class TileId {
  Big,
  Mid,
  Small,
  Deep,
  Wide,
  WideDeep,
  Tall,
  Mid2,
  Pair,
  Warpgroup64,
  Warpgroup128,
  Warpgroup256,
  Warpgroup64Pair,
  Warpgroup128Pair,
  Specialized128,
  Bulk128,
  Bulk256
};
#if defined(__HIP__)
constexpr bool kMidTile = false, kNvidiaTiles = false;
constexpr int kF16Stages = 2, kF16BigStages = 2;
#else
constexpr bool kMidTile = true, kNvidiaTiles = true;
constexpr int kF16Stages = 4, kF16BigStages = 3;  // 48 KiB of static shared memory at most
#endif
struct F16Tiles {
  using Big = BlockTile<128, 128, 32, 256, kF16BigStages, 1>;
  using Mid = BlockTile<128, 64, 32, 128, kF16Stages, 3>;
  using Small = BlockTile<64, 64, 32, 128, kF16Stages, 3>;
  using Deep = BlockTile<128, 128, 64, 256, 3, 2>;
  // Candidates (NVIDIA, matrix tiles), forced by name until measured: 64 x 64 warp tiles.
  using Wide = BlockTile<128, 128, 32, 128, 4, 2>;
  using WideDeep = BlockTile<128, 128, 64, 128, 3, 2>;
  using Tall = BlockTile<256, 128, 32, 256, 4, 1, 4>;
  using Mid2 = BlockTile<128, 64, 32, 128, 4, 2>;
  using Pair = BlockTile<128, 64, 32, 64, 4, 4>;
};
struct F32Tiles {
  using Big = BlockTile<128, 128, 16, 256, 2, 1>;
  using Mid = BlockTile<128, 64, 16, 128, 3, 2>;
  using Small = BlockTile<64, 64, 16, 128, 3, 4>;
};

// The shared memory of a tile's ring of stages (also what its epilogue stages through), and
// whether it is dynamic (past the 48 KiB a kernel may declare statically).
template <typename S, typename Tile>
KILN_HOST_DEVICE constexpr size_t pipe_bytes() {
  return size_t{Tile::kStages} * (size_t{Tile::BM} + Tile::BN) * Tile::BK * sizeof(S);
}
template <typename S, typename Tile>
constexpr bool kDynamicSmem = pipe_bytes<S, Tile>() > 48 * 1024;

// HIP's second launch bound means something else (waves per execution unit): AMD gets the
// thread count alone.
#if defined(__HIP__)
#define KILN_GEMM_LAUNCH_BOUNDS(Tile) __launch_bounds__(Tile::kThreads)
#else
#define KILN_GEMM_LAUNCH_BOUNDS(Tile) __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
#endif

// The split of the reduction a launch makes (split-K, GemmArgs::partials): `count` parts of
// `steps` steps of BK each (the last one shorter), as blocks along z beside the batch.
struct SplitK {
  int count = 1;
  int steps = 0;
};

// What one block of a launch multiplies (blockIdx.z: batch entry and part of a split
// reduction): batch entry z, zz the block's z, and its steps of BK of the reduction.
struct BlockPart {
  int64_t z, zz;
  int first_step, steps;
};
// zz: the block's z (a persistent grid's tiles name it themselves).
__device__ inline BlockPart block_part(const GemmArgs& p, const SplitK& split, int bk, int64_t zz) {
  BlockPart b;
  b.zz = zz;
  b.z = b.zz / split.count;
  const int part = static_cast<int>(b.zz % split.count);
  const int all_steps = static_cast<int>((p.k + bk - 1) / bk);
  b.first_step = part * split.steps;
  b.steps = split.count == 1 || all_steps - b.first_step < split.steps ? all_steps - b.first_step
                                                                       : split.steps;
  return b;
}
__device__ inline BlockPart block_part(const GemmArgs& p, const SplitK& split, int bk) {
  return block_part(p, split, bk, blockIdx.z);
}

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

// 16 bytes global -> shared, or 16 zero bytes when !inside, without a branch on NVIDIA
// (cp.async's source size 0 fills the destination with zeros; `global` must still be a valid
// address). Elsewhere the plain copy (copy_async_16) or a store of zeros.
__device__ inline void copy_async_16_or_zero(void* smem, const void* global, bool inside) {
#if defined(KILN_CP_ASYNC)
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(inside ? 16 : 0));
#else
  if (inside) {
    copy_async_16(smem, global);
  } else {
    copy_16(smem, Bytes16{});
  }
#endif
}

// How a stage L of 16-byte chunks is shared among a block's threads: the chunks of one thread
// lie in one column of chunks, kRowsPerPass rows apart, kPerThread of them. Both stagers below
// copy this way.
template <typename S, int Threads, typename L>
struct ChunkGeometry {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(S));
  static constexpr int kChunksPerRow = L::kCols / kVec;
  static_assert(L::kCols % kVec == 0 && Threads % kChunksPerRow == 0 &&
                L::kRows % (Threads / kChunksPerRow) == 0);
  static constexpr int kRowsPerPass = Threads / kChunksPerRow;
  static constexpr int kPerThread = L::kRows / kRowsPerPass;
};

// Output pixel `row` of a convolution (a row of its im2col matrix): its image and the input
// position of its window's corner. 32-bit divisions where `narrow` (M below 2^32; the launcher
// keeps a plane below 2^31 pixels).
struct WindowCorner {
  int64_t image;
  int ih, iw;
};
__device__ inline WindowCorner window_corner(const ConvGeometry& g, int64_t row, bool narrow) {
  const unsigned pixels = static_cast<unsigned>(g.oh * g.ow), ow = static_cast<unsigned>(g.ow);
  int64_t image;
  unsigned at;
  if (narrow) {
    const unsigned r32 = static_cast<unsigned>(row);
    image = r32 / pixels, at = r32 % pixels;
  } else {
    image = row / pixels, at = static_cast<unsigned>(row % pixels);
  }
  return {image, static_cast<int>(at / ow) * g.stride_h - g.pad_top,
          static_cast<int>(at % ow) * g.stride_w - g.pad_left};
}

// The 16-byte staging copies one thread makes of one operand, for every step of an output
// tile: what does not change between steps (source pointers, the chunk's place in the stage,
// which chunks lie inside the operand along M or N) is computed once per tile, so a step costs
// a pointer offset, one compare against K and the copy per chunk. KAlongCols: the operand's
// storage rows are M or N and its columns K (A, or B transposed), else its rows are K. The
// stage L holds the tile's rows x columns as they lie in storage, swizzled.
template <typename S, int Threads, typename L, bool KAlongCols>
struct VectorStager : ChunkGeometry<S, Threads, L> {
  using G = ChunkGeometry<S, Threads, L>;
  using G::kChunksPerRow, G::kPerThread, G::kRowsPerPass, G::kVec;
  static constexpr int kBK = KAlongCols ? L::kCols : L::kRows;

  const S* base;  // the operand (a valid address for the zero-filling copies)
  const S* src[kPerThread];
  int64_t step_elems;  // how far the sources move per step
  int64_t k;           // the reduction's extent
  int r0, c0;          // this thread's first chunk in the tile
  uint32_t inside_mn;  // bit i: chunk i lies inside the operand along M or N

  // `p`: the operand, `ld` its leading dimension, rows x cols its storage extent; mn0 the tile's
  // first row (KAlongCols) or column of storage.
  __device__ void init(const S* p, int64_t ld, int64_t rows, int64_t cols, int64_t mn0) {
    base = p;
    const int t = static_cast<int>(threadIdx.x);
    r0 = t / kChunksPerRow;
    c0 = (t % kChunksPerRow) * kVec;
    inside_mn = 0;
    k = KAlongCols ? cols : rows;
    step_elems = KAlongCols ? kBK : kBK * ld;
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t r = r0 + i * kRowsPerPass;
      const int64_t row = KAlongCols ? mn0 + r : r, col = KAlongCols ? c0 : mn0 + c0;
      // Every row is 16-byte aligned, so cols is a multiple of kVec: a chunk lies wholly
      // inside or outside.
      const bool in = KAlongCols ? row < rows : col < cols;
      inside_mn |= uint32_t{in} << i;
      src[i] = in ? p + row * ld + col : p;
    }
  }
  // A convolution's A as the pixels' rows of a channels-last input x [images, h, w, c] when its
  // filter is 1 x 1 (any strides and pads): the reduction is the channels, and each row of the
  // im2col matrix one input pixel's channels, or zeros where a pad puts the window outside.
  // (ConvStager would decode, every step, taps that never change: the strided 1x1
  // downsampling convolutions.)
  __device__ void init_pixels(const S* x, const ConvGeometry& g, int64_t m, int64_t m0) {
    static_assert(KAlongCols, "the pixels are A's rows");
    base = x;
    const int t = static_cast<int>(threadIdx.x);
    r0 = t / kChunksPerRow;
    c0 = (t % kChunksPerRow) * kVec;
    inside_mn = 0;
    k = g.c;
    step_elems = kBK;
    const bool narrow = m <= int64_t{UINT32_MAX};
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t row = m0 + r0 + i * kRowsPerPass;
      const WindowCorner at = window_corner(g, row, narrow);
      const bool in = row < m && static_cast<unsigned>(at.ih) < static_cast<unsigned>(g.h) &&
                      static_cast<unsigned>(at.iw) < static_cast<unsigned>(g.w);
      inside_mn |= uint32_t{in} << i;
      src[i] = in ? x + ((at.image * g.h + at.ih) * g.w + at.iw) * g.c + c0 : x;
    }
  }
  __device__ void issue(S* stage, int step) const {
    const int64_t k0 = int64_t{step} * kBK;
    const int64_t offset = int64_t{step} * step_elems;
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int r = r0 + i * kRowsPerPass;
      const bool inside = ((inside_mn >> i) & 1u) && k0 + (KAlongCols ? c0 : r) < k;
      copy_async_16_or_zero(stage + L::offset(r, c0), inside ? src[i] + offset : base, inside);
    }
  }
};

// The 16-byte staging copies of an implicit-GEMM convolution's A (GemmArgs::conv_a): the stage
// L holds BM output pixels x BK of the reduction (r, s, c). What a chunk's row needs (its
// image, its window's corner) is computed once per output tile; the thread's column is decoded
// into (r, s, c) once per tile too, then advanced by BK per step without a division (steps are
// issued in order, from the part's first one), and each chunk is one zero-filling copy:
// padding, rows past M and columns past K read zeros. Needs c % (16 bytes) == 0, so that a chunk
// never straddles two taps.
template <typename S, int Threads, typename L>
struct ConvStager : ChunkGeometry<S, Threads, L> {
  using G = ChunkGeometry<S, Threads, L>;
  using G::kChunksPerRow, G::kPerThread, G::kRowsPerPass, G::kVec;
  static constexpr int kBK = L::kCols;
  // A row past M: a window corner so far out that no tap reaches the image.
  static constexpr int kOutside = -(1 << 30);

  const S* base;
  const S* image[kPerThread];
  int ih0[kPerThread], iw0[kPerThread];
  int r0, c0;
  unsigned k, c, s_taps;
  int h, w, dil_h, dil_w;
  // The thread's next column and its (r, s, c).
  unsigned col, ch, tap_s, tap_r;

  __device__ void init(const S* x, const ConvGeometry& g, int64_t m, int64_t k_total, int64_t m0,
                       int first_step) {
    base = x;
    const int t = static_cast<int>(threadIdx.x);
    r0 = t / kChunksPerRow;
    c0 = (t % kChunksPerRow) * kVec;
    k = static_cast<unsigned>(k_total);
    c = static_cast<unsigned>(g.c);
    s_taps = static_cast<unsigned>(g.s);
    h = static_cast<int>(g.h), w = static_cast<int>(g.w);
    dil_h = g.dil_h, dil_w = g.dil_w;
    const bool narrow = m <= int64_t{UINT32_MAX};
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t row = m0 + r0 + i * kRowsPerPass;
      if (row < m) {
        const WindowCorner at = window_corner(g, row, narrow);
        image[i] = x + at.image * g.h * g.w * g.c;
        ih0[i] = at.ih;
        iw0[i] = at.iw;
      } else {
        image[i] = x;
        ih0[i] = iw0[i] = kOutside;
      }
    }
    col = static_cast<unsigned>(first_step) * kBK + static_cast<unsigned>(c0);
    ch = col % c;
    const unsigned rs = col / c;
    tap_s = rs % s_taps;
    tap_r = rs / s_taps;
  }
  // `step` is the next one in order (the ring issues them so).
  __device__ void issue(S* stage, int /*step*/) {
    const int dh = static_cast<int>(tap_r) * dil_h, dw = static_cast<int>(tap_s) * dil_w;
    KILN_UNROLL
    for (int i = 0; i < kPerThread; ++i) {
      const int ih = ih0[i] + dh, iw = iw0[i] + dw;
      const bool inside = col < k && static_cast<unsigned>(ih) < static_cast<unsigned>(h) &&
                          static_cast<unsigned>(iw) < static_cast<unsigned>(w);
      const S* src = inside ? image[i] + (int64_t{ih} * w + iw) * int64_t{c} + ch : base;
      copy_async_16_or_zero(stage + L::offset(r0 + i * kRowsPerPass, c0), src, inside);
    }
    col += kBK;
    ch += kBK;
    while (ch >= c) {
      ch -= c;
      if (++tap_s == s_taps) tap_s = 0, ++tap_r;
    }
  }
};

// A convolution's A tile for a step element by element (c not a multiple of 16 bytes, e.g. a
// network's first layer): rows m0.. of the im2col matrix, reduction columns k0.., zeros for
// padding and outside.
template <typename S, int Threads, typename L>
__device__ inline void stage_conv_elements(S* smem, const S* x, const ConvGeometry& g, int64_t m,
                                           int64_t k, int64_t m0, int64_t k0) {
  constexpr int kPerThread = L::kRows * L::kCols / Threads;
  static_assert(L::kRows * L::kCols % Threads == 0);
  const int64_t pixels = g.oh * g.ow;
  KILN_NO_UNROLL
  for (int i = 0; i < kPerThread; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * Threads;
    const int r = e / L::kCols, cc = e % L::kCols;
    const int64_t row = m0 + r, col = k0 + cc;
    S v = S(0);
    if (row < m && col < k) {
      const int64_t img = row / pixels, at = row % pixels;
      const int64_t ch = col % g.c, rs = col / g.c;
      const int64_t ih = (at / g.ow) * g.stride_h - g.pad_top + (rs / g.s) * g.dil_h;
      const int64_t iw = (at % g.ow) * g.stride_w - g.pad_left + (rs % g.s) * g.dil_w;
      if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
        v = x[((img * g.h + ih) * g.w + iw) * g.c + ch];
    }
    smem[L::offset(r, cc)] = v;
  }
}

// Copies of one operand's tile for a step element by element (some row not 16-byte aligned):
// storage rows row0.. (of row_extent) and columns col0.. (of col_extent) of the operand at `p`
// with leading dimension `ld`, into the swizzled stage L; zeros outside the operand.
template <typename S, int Threads, typename L>
__device__ inline void stage_elements(S* smem, const S* p, int64_t ld, int64_t row_extent,
                                      int64_t col_extent, int64_t row0, int64_t col0) {
  constexpr int kPerThread = L::kRows * L::kCols / Threads;
  static_assert(L::kRows * L::kCols % Threads == 0);
  // Not unrolled: these loads would all be in flight at once, their registers beside the
  // accumulators (the aligned kernel's spills).
  KILN_NO_UNROLL
  for (int i = 0; i < kPerThread; ++i) {
    const int e = static_cast<int>(threadIdx.x) + i * Threads;
    const int r = e / L::kCols, c = e % L::kCols;
    const int64_t row = row0 + r, col = col0 + c;
    smem[L::offset(r, c)] = row < row_extent && col < col_extent ? p[row * ld + col] : S(0);
  }
}

#if defined(__CUDACC__) || defined(__HIP__)
#define KILN_GEMM_NOINLINE __noinline__
#else
#define KILN_GEMM_NOINLINE
#endif

// The activation of the copy-out, out of line so that the loop stays small whatever the
// activation (the switch over every activation, inlined per element and per accumulator,
// filled the instruction cache: a third of the warps' stalls at K = 64). Scalars, not
// GemmArgs: a reference to the kernel's parameters would copy them to the stack.
[[maybe_unused]] static __device__ KILN_GEMM_NOINLINE float activate_out_of_line(
    float v, GemmActivation activation, float alpha, float beta) {
  return apply_activation(activation, v, alpha, beta);
}

// The copy-out of an output tile, one chunk of kChunk consecutive outputs of a row at a time
// (16 bytes of T), from float32 values with alpha applied: adds the bias and beta C, applies
// the activation and rounds once to T; or, for a part of a split reduction, writes the float32
// partials (the rest of the epilogue comes with their sum). What stays the same over the launch
// (pointers of the batch entry, which reads are 16-byte chunks) is set up once.
template <typename T>
struct TileOutput {
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
  static_assert(kChunk % 4 == 0);
  const T* c;
  const T* bias;
  T* y;
  float* partial;
  // Y's rows are 16-byte aligned (n a multiple of the chunk, every batch entry too). Relu stays
  // inline; other activations are called out of line. A bias, and a full C whose rows are
  // 16-byte aligned (a convolution's residual), are read 16 bytes a chunk.
  bool y_vec, relu, other_act, bias_vec, c_vec;

  // Batch entry z; zz the block's z (batch entry and part of a split reduction).
  __device__ void init(const GemmArgs& p, int64_t z, int64_t zz, const SplitK& split) {
    c = p.c ? static_cast<const T*>(p.c) + z * p.c_batch_stride : nullptr;
    bias = static_cast<const T*>(p.bias);
    y = static_cast<T*>(p.y) + z * p.m * p.n;
    partial = split.count > 1 ? p.partials + zz * p.m * p.n : nullptr;
    y_vec = p.n % kChunk == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
    relu = p.activation == GemmActivation::Relu;
    other_act = !relu && p.activation != GemmActivation::None;
    bias_vec = bias && p.n % kChunk == 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0;
    c_vec = c && p.c_col_stride == 1 && p.c_row_stride % kChunk == 0 &&
            p.c_batch_stride % kChunk == 0 && reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
  }

  // Asks L2 for the BM x BN tile at (m0, n0) of a full C (a convolution's residual) before the
  // tile's products: the copy-out reads it a chunk at a time, each read waited for before its
  // store, and from DRAM those waits made it latency-bound. `Threads` threads share the lines.
  template <int BM, int BN, int Threads>
  __device__ void prefetch_c(const GemmArgs& p, int64_t m0, int64_t n0, int thread) const {
    if (!c_vec || partial) return;
    constexpr int kLineElems = 128 / static_cast<int>(sizeof(T));
    constexpr int kLinesPerRow = (BN + kLineElems - 1) / kLineElems;
    KILN_NO_UNROLL
    for (int i = thread; i < BM * kLinesPerRow; i += Threads) {
      const int64_t row = m0 + i / kLinesPerRow, col = n0 + (i % kLinesPerRow) * kLineElems;
      if (row < p.m && col < p.n) prefetch_l2(c + row * p.c_row_stride + col);
    }
  }

  // The same from kChunk float32 values staged at `staged` (16-byte aligned).
  __device__ void store_staged(const GemmArgs& p, int64_t row, int64_t col,
                               const float* staged) const {
    float v[kChunk];
    KILN_UNROLL
    for (int e = 0; e < kChunk; e += 4) copy_16(&v[e], staged + e);
    store(p, row, col, v);
  }

  // Outputs (row, col..col + kChunk - 1), those inside Y; `v` may be changed.
  __device__ void store(const GemmArgs& p, int64_t row, int64_t col, float (&v)[kChunk]) const {
    if (partial) {
      float* dst = partial + row * p.n + col;
      KILN_UNROLL
      for (int e = 0; e < kChunk; e += 4) {
        if (p.n % 4 == 0 && col + e + 4 <= p.n) {
          copy_16(dst + e, &v[e]);
        } else {
          for (int f = e; f < e + 4 && col + f < p.n; ++f) dst[f] = v[f];
        }
      }
      return;
    }
    struct alignas(16) Chunk {
      T v[kChunk];
    };
    const bool whole = col + kChunk <= p.n;
    if (bias) {
      if (bias_vec && whole) {
        Chunk b;
        copy_16(&b, bias + col);
        KILN_UNROLL
        for (int e = 0; e < kChunk; ++e) v[e] += to_float(b.v[e]);
      } else {
        for (int e = 0; e < kChunk && col + e < p.n; ++e) v[e] += to_float(bias[col + e]);
      }
    }
    if (c) {
      if (c_vec && whole) {
        Chunk in;
        copy_16(&in, c + row * p.c_row_stride + col);
        KILN_UNROLL
        for (int e = 0; e < kChunk; ++e) v[e] += p.beta * to_float(in.v[e]);
      } else {
        for (int e = 0; e < kChunk && col + e < p.n; ++e) {
          v[e] += p.beta * to_float(c[row * p.c_row_stride + (col + e) * p.c_col_stride]);
        }
      }
    }
    if (relu) {
      KILN_UNROLL
      for (int e = 0; e < kChunk; ++e) v[e] = point::relu(v[e]);
    } else if (other_act) {
      for (int e = 0; e < kChunk && col + e < p.n; ++e) {
        v[e] = activate_out_of_line(v[e], p.activation, p.act_alpha, p.act_beta);
      }
    }
    Chunk out;
    KILN_UNROLL
    for (int e = 0; e < kChunk; ++e) out.v[e] = from_float<T>(v[e]);
    T* dst = y + row * p.n + col;
    if (y_vec && whole) {
      copy_16(dst, &out);
    } else {
      for (int e = 0; e < kChunk && col + e < p.n; ++e) dst[e] = out.v[e];
    }
  }
};

// How many passes the epilogue's float32 staging of a BM x BN tile takes through `bytes` of
// shared memory: each pass holds TM / passes of every wavefront's TM rows of op tiles.
KILN_HOST_DEVICE constexpr int epilogue_passes(int tm, int bm, int stride, size_t bytes) {
  for (int passes = 1; passes <= tm; ++passes) {
    if (tm % passes == 0 && size_t(bm / passes) * size_t(stride) * sizeof(float) <= bytes) {
      return passes;
    }
  }
  return 0;
}

template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB, bool Conv>
__device__ inline void gemm_block(const GemmArgs& p, bool vec, SplitK split) {
  static_assert(!Conv || (!TA && TB), "a convolution's A is [pixels][r s c], B its filters");
  using Op = typename TileOpOf<Kind, S>::type;
  static_assert(sizeof(typename Op::In) == sizeof(S));
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK;
  constexpr int kThreads = Tile::kThreads, kStages = Tile::kStages;
  // The wavefronts of the block in a 2 x (W / 2) grid, each with a TM x TN grid of op tiles.
  constexpr int kWarps = kThreads / KILN_WARP_SIZE;
  constexpr int kWarpsM = Tile::kWarpsM, kWarpsN = kWarps / kWarpsM;
  constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;
  constexpr int TM = WM / Op::kM, TN = WN / Op::kN;
  static_assert(kWarpsN >= 1 && TM >= 1 && TN >= 1 && WM % Op::kM == 0 && WN % Op::kN == 0 &&
                BK % Op::kK == 0 && kStages >= 2);
  // A is k-contiguous unless transposed ([m][k] rows, else [k][m]); B only when transposed.
  using LA = SwizzledTile<S, TA ? BK : BM, TA ? BM : BK>;
  using LB = SwizzledTile<S, TB ? BN : BK, TB ? BK : BN>;
  constexpr int kStageElems = LA::kElems + LB::kElems;
  constexpr size_t kPipeBytes = pipe_bytes<S, Tile>();
  static_assert(kPipeBytes == size_t{kStages} * kStageElems * sizeof(S));
  // The epilogue stages alpha times the accumulators in float32 through the stages' memory,
  // kPasses slices of the tile's rows at a time; rows kAccStride floats apart (BN + 8: a
  // wavefront's accumulator rows, 8 floats further per row, fall on different banks). The
  // block then reads each slice out 16 output bytes per thread, adds beta C, applies the
  // activation and rounds once to T.
  constexpr int kAccStride = BN + 8;
  constexpr int kPasses = epilogue_passes(TM, BM, kAccStride, kPipeBytes);
  static_assert(kPasses > 0, "the epilogue's staging does not fit the pipeline's memory");
  constexpr int kPassRowsPerWarp = WM / kPasses;  // rows of one wavefront row in one pass
  constexpr int kPassTiles = TM / kPasses;        // op tiles along M of a wavefront per pass
  constexpr int kPassRows = BM / kPasses;
  constexpr int kOutChunk = TileOutput<T>::kChunk;
  constexpr int kOutChunksPerRow = BN / kOutChunk;
  static_assert(BN % kOutChunk == 0 && kOutChunk % 4 == 0);
  unsigned char* smem_bytes;
  if constexpr (kDynamicSmem<S, Tile>) {
    KILN_DYNAMIC_SHARED(Bytes16, gemm_dynamic_smem);
    smem_bytes = reinterpret_cast<unsigned char*>(gemm_dynamic_smem);
  } else {
    __shared__ SmemBytes<kPipeBytes> smem;
    smem_bytes = smem.bytes;
  }
  S* const stages = reinterpret_cast<S*>(smem_bytes);
  float* const staged_acc = reinterpret_cast<float*>(smem_bytes);

  const int warp = static_cast<int>(threadIdx.x) / KILN_WARP_SIZE;
  const int lane = static_cast<int>(threadIdx.x) % KILN_WARP_SIZE;
  const int warp_row = warp / kWarpsN;
  const int wm0 = warp_row * WM, wn0 = (warp % kWarpsN) * WN;
  // Blocks along z: a batch entry and a part of its reduction.
  const BlockPart part = block_part(p, split, BK);
  const int first_step = part.first_step, steps = part.steps;
  const S* a = static_cast<const S*>(p.a) + part.z * p.stride_a;
  const S* b = static_cast<const S*>(p.b) + part.z * p.stride_b;
  TileOutput<T> out;
  out.init(p, part.z, part.zz, split);
  const int64_t lda = TA ? p.m : p.k, ldb = TB ? p.k : p.n;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t m_tiles = (p.m + BM - 1) / BM;
  // Storage extents of A and B (rows, columns).
  const int64_t a_rows = TA ? p.k : p.m, a_cols = TA ? p.m : p.k;
  const int64_t b_rows = TB ? p.n : p.k, b_cols = TB ? p.k : p.n;

  for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
    const int64_t m0 = mt * BM;
    // Set up whether or not they copy (a few instructions per tile; the element path
    // ignores them).
    std::conditional_t<Conv, ConvStager<S, kThreads, LA>, VectorStager<S, kThreads, LA, !TA>>
        stage_a;
    VectorStager<S, kThreads, LB, TB> stage_b;
    if constexpr (Conv) {
      stage_a.init(a, p.conv, p.m, p.k, m0, first_step);
    } else {
      stage_a.init(a, lda, a_rows, a_cols, m0);
    }
    stage_b.init(b, ldb, b_rows, b_cols, n0);
    out.template prefetch_c<BM, BN, kThreads>(p, m0, n0, static_cast<int>(threadIdx.x));
    // Step `step`'s copies (of this part) into its stage of the ring. The alignment is a run-time
    // switch (the same for the whole launch), not a template argument: one kernel instead of two
    // per tile and transpose halves what the compilers build (four AMD targets).
    auto issue = [&](int step) {
      S* st = stages + (step % kStages) * kStageElems;
      const int k_step = first_step + step;  // of the whole reduction
      if (vec) {
        stage_a.issue(st, k_step);
        stage_b.issue(st + LA::kElems, k_step);
        return;
      }
      const int64_t k0 = int64_t{k_step} * BK;
      if constexpr (Conv) {
        stage_conv_elements<S, kThreads, LA>(st, a, p.conv, p.m, p.k, m0, k0);
      } else {
        stage_elements<S, kThreads, LA>(st, a, lda, a_rows, a_cols, TA ? k0 : m0, TA ? m0 : k0);
      }
      stage_elements<S, kThreads, LB>(st + LA::kElems, b, ldb, b_rows, b_cols, TB ? n0 : k0,
                                      TB ? k0 : n0);
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
        if constexpr (Op::kLoadsBPairs && TN % 2 == 0) {
          KILN_UNROLL
          for (int j = 0; j < TN; j += 2) {
            Op::load_b2(fb[j], fb[j + 1], vb, wn0 + j * Op::kN, kk, lane);
          }
        } else {
          KILN_UNROLL
          for (int j = 0; j < TN; ++j) Op::load_b(fb[j], vb, wn0 + j * Op::kN, kk, lane);
        }
        KILN_UNROLL
        for (int i = 0; i < TM; ++i) {
          KILN_UNROLL
          for (int j = 0; j < TN; ++j) Op::mma(acc[i][j], fa[i], fb[j]);
        }
      }
    }
    copy_async_wait<0>();
    KILN_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      // Every warp done with the stages (or the previous pass) before the accumulators land.
      __syncthreads();
      KILN_UNROLL
      for (int il = 0; il < kPassTiles; ++il) {
        const int i = pass * kPassTiles + il;
        KILN_UNROLL
        for (int j = 0; j < TN; ++j) {
          KILN_UNROLL
          for (int e = 0; e < Op::kAcc; ++e) {
            int r, col_in_tile;
            Op::acc_coord(lane, e, r, col_in_tile);
            const int sr = warp_row * kPassRowsPerWarp + il * Op::kM + r;
            staged_acc[sr * kAccStride + wn0 + j * Op::kN + col_in_tile] = p.alpha * acc[i][j][e];
          }
        }
      }
      __syncthreads();
      constexpr int kPassChunks = kPassRows * kOutChunksPerRow;
      KILN_UNROLL
      for (int it = 0; it < (kPassChunks + kThreads - 1) / kThreads; ++it) {
        const int chunk = static_cast<int>(threadIdx.x) + it * kThreads;
        if (kPassChunks % kThreads != 0 && chunk >= kPassChunks) break;
        const int sr = chunk / kOutChunksPerRow, cc = (chunk % kOutChunksPerRow) * kOutChunk;
        // The staged row's place in the tile: wavefront row, then this pass's slice of it.
        const int tr =
            (sr / kPassRowsPerWarp) * WM + pass * kPassRowsPerWarp + sr % kPassRowsPerWarp;
        const int64_t row = m0 + tr, col = n0 + cc;
        if (row >= p.m || col >= p.n) continue;
        out.store_staged(p, row, col, staged_acc + sr * kAccStride + cc);
      }
    }
    // The last slice read out before the next tile's copies land in the same memory.
    __syncthreads();
  }
}

// Kind: the tile op (mma_tile.hpp); S: what shared memory holds (uint16_t: fp16 bits, or float);
// T: the element type of C and Y; TA / TB: transposes; vec: every row of A and B 16-byte
// aligned (16-byte staging copies, else element by element).
template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB, bool Conv>
__global__ void KILN_GEMM_LAUNCH_BOUNDS(Tile) gemm_kernel(GemmArgs p, bool vec, SplitK split) {
  if constexpr (kRunsHere<Kind, S>) gemm_block<Kind, S, T, Tile, TA, TB, Conv>(p, vec, split);
}

// Lets `kernel` take `bytes` of dynamic shared memory on the current device (past 48 KiB a
// kernel must ask), once per device.
hipError_t allow_dynamic_smem(const void* kernel, size_t bytes, unsigned long long& devices_done);

template <TileKind Kind, typename S, typename T, typename Tile, bool TA, bool TB, bool Conv>
hipError_t launch_tile(const GemmArgs& p, bool vec, SplitK split, hipStream_t stream) {
  const int64_t n_tiles = (p.n + Tile::BN - 1) / Tile::BN;
  const int64_t m_tiles = (p.m + Tile::BM - 1) / Tile::BM;
  if (n_tiles > INT_MAX || p.batch * split.count > 65535) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>(m_tiles < 65535 ? m_tiles : 65535),
                  static_cast<unsigned>(p.batch * split.count));
  auto* kernel = &gemm_kernel<Kind, S, T, Tile, TA, TB, Conv>;
  size_t shared_bytes = 0;
  if constexpr (kDynamicSmem<S, Tile>) {
    static unsigned long long devices_done = 0;
    shared_bytes = pipe_bytes<S, Tile>();
    const hipError_t allowed =
        allow_dynamic_smem(reinterpret_cast<const void*>(kernel), shared_bytes, devices_done);
    if (allowed != hipSuccess) return allowed;
  }
  hipLaunchKernelGGL(kernel, grid, dim3(Tile::kThreads), shared_bytes, stream, p, vec, split);
  return hipGetLastError();
}

// Both operands take 16-byte staging copies when every row of both starts 16-byte aligned.
inline bool aligned(const void* ptr, int64_t ld, int64_t batch_stride, int64_t batch, int elems) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % elems == 0 &&
         (batch == 1 || batch_stride % elems == 0);
}

// Whether every row of A and B (a convolution's input: every pixel's channels) starts 16-byte
// aligned, so that the stages take 16-byte copies.
inline bool operands_aligned(const GemmArgs& p) {
  const int vec = p.type == FloatType::F32 ? 4 : 8;
  return p.conv_a ? aligned(p.a, p.conv.c, 0, 1, vec) && aligned(p.b, p.k, 0, 1, vec)
                  : aligned(p.a, p.trans_a ? p.m : p.k, p.stride_a, p.batch, vec) &&
                        aligned(p.b, p.trans_b ? p.k : p.n, p.stride_b, p.batch, vec);
}

// One tile op's kernels for `tile` (Tiles: F16Tiles or F32Tiles), by transposes and alignment,
// or a convolution's.
template <TileKind Kind, typename S, typename T, typename Tiles>
hipError_t launch_op(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  const bool vec = operands_aligned(p);
  auto by_tile = [&]<bool TA, bool TB, bool Conv>() {
    if constexpr (kMidTile) {
      if (tile == TileId::Mid) {
        return launch_tile<Kind, S, T, typename Tiles::Mid, TA, TB, Conv>(p, vec, split, stream);
      }
    }
    if constexpr (kNvidiaTiles && Kind == TileKind::Matrix) {
      switch (tile) {
        case TileId::Deep:
          return launch_tile<Kind, S, T, typename Tiles::Deep, TA, TB, Conv>(p, vec, split, stream);
        case TileId::Wide:
          return launch_tile<Kind, S, T, typename Tiles::Wide, TA, TB, Conv>(p, vec, split, stream);
        case TileId::WideDeep:
          return launch_tile<Kind, S, T, typename Tiles::WideDeep, TA, TB, Conv>(p, vec, split,
                                                                                 stream);
        case TileId::Tall:
          return launch_tile<Kind, S, T, typename Tiles::Tall, TA, TB, Conv>(p, vec, split, stream);
        case TileId::Mid2:
          return launch_tile<Kind, S, T, typename Tiles::Mid2, TA, TB, Conv>(p, vec, split, stream);
        case TileId::Pair:
          return launch_tile<Kind, S, T, typename Tiles::Pair, TA, TB, Conv>(p, vec, split, stream);
        default:
          break;
      }
    }
    return tile == TileId::Big
               ? launch_tile<Kind, S, T, typename Tiles::Big, TA, TB, Conv>(p, vec, split, stream)
               : launch_tile<Kind, S, T, typename Tiles::Small, TA, TB, Conv>(p, vec, split,
                                                                              stream);
  };
  if (p.conv_a) return by_tile.template operator()<false, true, true>();
  if (p.trans_a) {
    return p.trans_b ? by_tile.template operator()<true, true, false>()
                     : by_tile.template operator()<true, false, false>();
  }
  return p.trans_b ? by_tile.template operator()<false, true, false>()
                   : by_tile.template operator()<false, false, false>();
}

// The launchers of each tile op, one source file each.
hipError_t launch_f32(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream);
hipError_t launch_f16_matrix(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream);
hipError_t launch_f16_fma(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream);
// NVIDIA sm_90 only (built for sm_90a; elsewhere the launch fails): A not transposed, every
// row of A and B 16-byte aligned.
hipError_t launch_f16_wgmma(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream);
hipError_t launch_f16_wgmma_ws(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels::gemm_impl
