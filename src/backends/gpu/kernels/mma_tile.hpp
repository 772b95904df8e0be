#pragma once
// One wavefront-level matrix multiply-accumulate tile behind one small interface, so that the
// GEMM (gemm.hip) is written once for every target. A tile op multiplies a kM x kK slice of A by
// a kK x kN slice of B into a kM x kN float32 accumulator spread over the wavefront's lanes:
//
//   using In;                        what shared memory holds (uint16_t: fp16 bits; float)
//   kM, kN, kK, kAcc                 the tile, and accumulator floats per lane
//   FragA, FragB                     a lane's share of the A and B slices (registers)
//   load_a(fa, view, m0, k0, lane)   fills a lane's FragA from the staged operand (a view:
//                                    SmemOperand or SwizzledOperand below)
//   load_b(fb, view, n0, k0, lane)
//   kLoadsBPairs, load_b2(f0, f1, view, n0, k0, lane)
//                                    (where kLoadsBPairs) the FragBs of n tiles n0 and n0 + kN
//                                    in one load
//   mma(acc, fa, fb)                 acc += A B (every lane of the wavefront calls it)
//   acc_coord(lane, i, row, col)     where acc[i] of `lane` lies in the kM x kN tile
//   kAccRowLanes                     lanes that hold one accumulator row: aligned groups of
//                                    that many consecutive lanes, the same row for the same i
//                                    (a row's reduction is a butterfly within the group)
//   kAccLaneRows, acc_lane_row(i)    rows one lane holds, and which of them acc[i] lies in
//
// Three ops: NVIDIA's mma.sync m16n8k16 (sm_80+, inline PTX, warp of 32), AMD CDNA's
// v_mfma_f32_16x16x16f16 (gfx908, gfx90a, gfx940; wavefront of 64), and FmaTile, plain FMA for
// any wavefront size and float32 (RDNA 2's gfx1030 has no matrix instruction; float32 GEMMs and
// the host emulation use it too). The matrix ops are described by where each lane's registers
// lie in the tile (a_coord / b_coord / acc_coord, from the PTX ISA and AMD's instruction
// tables), and their loads are written from that description alone; the host emulation
// (KILN_EMU_MMA, tests/gpu_emu) computes the instruction from the same description, so a wrong
// lane layout fails the CPU tests.
#include <cstdint>

#if !defined(__CUDACC__) && !defined(__HIP__)
#include <cstring>
#endif

#include "backends/gpu/kernels/device_common.hpp"  // KILN_UNROLL, KILN_NO_UNROLL
#include "backends/gpu/kernels/tile_copy.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// A block's staged tile of one operand, seen as op[mn][k] (a row of A or a column of B, and the
// reduction index) over shared memory that is contiguous along k (KContiguous) or along mn.
// `stride` is the distance between consecutive rows of the storage.
template <typename S, bool KContiguous>
struct SmemOperand {
  const S* data;
  int stride;

  __device__ S at(int mn, int k) const {
    return KContiguous ? data[mn * stride + k] : data[k * stride + mn];
  }
  // The 16-bit elements (mn, k) and (mn, k + 1) in one word, (mn, k) in the low half (k even):
  // what a matrix instruction's register holds.
  __device__ uint32_t pair(int mn, int k) const {
    if constexpr (KContiguous) {
      const S* p = data + mn * stride + k;
#if defined(__CUDACC__) || defined(__HIP__)
      return *reinterpret_cast<const uint32_t*>(p);
#else
      uint32_t w;
      std::memcpy(&w, p, sizeof w);
      return w;
#endif
    } else {
      return uint32_t(data[k * stride + mn]) | (uint32_t(data[(k + 1) * stride + mn]) << 16);
    }
  }
};

// A staged tile of kRows x kCols elements with no padding, its 16-byte chunks permuted within
// each row (XOR by the row): the 8 rows that one ldmatrix, or one column of a cp.async store,
// touches at the same column then fall on 8 different 16-byte bank groups, without the padding
// that would cost shared memory (and a pipeline stage). kCols / chunk must be a power of two.
template <typename S, int Rows, int Cols>
struct SwizzledTile {
  static constexpr int kRows = Rows, kCols = Cols, kElems = Rows * Cols;
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(S));  // elements per 16 bytes
  static constexpr int kChunks = Cols / kChunk;                    // chunks per row
  // 128 bytes (the 32 banks) hold 8 chunks: rows shorter than that share one such line.
  static constexpr int kRowsPerLine = kChunks >= 8 ? 1 : 8 / kChunks;
  static constexpr int kMask = (kChunks >= 8 ? 8 : kChunks) - 1;
  static_assert(Cols % kChunk == 0 && (kChunks & (kChunks - 1)) == 0);
  // Where element (row, col) lies; a chunk's elements stay contiguous (col % kChunk kept).
  __device__ static int offset(int row, int col) {
    const int chunk = (col / kChunk) ^ ((row / kRowsPerLine) & kMask);
    return row * Cols + chunk * kChunk + col % kChunk;
  }
};

// A SwizzledTile staged operand seen as op[mn][k], as SmemOperand; ptr() gives the address of
// an element, which the NVIDIA tile's ldmatrix loads take (8 elements from a chunk start).
template <typename S, typename Layout, bool KContiguous>
struct SwizzledOperand {
  static constexpr bool kKContiguous = KContiguous;
  const S* data;

  __device__ const S* ptr(int mn, int k) const {
    return data + (KContiguous ? Layout::offset(mn, k) : Layout::offset(k, mn));
  }
  __device__ S at(int mn, int k) const { return *ptr(mn, k); }
  __device__ uint32_t pair(int mn, int k) const {
    if constexpr (KContiguous) {
      // k even: both halves in one chunk, contiguous.
#if defined(__CUDACC__) || defined(__HIP__)
      return *reinterpret_cast<const uint32_t*>(ptr(mn, k));
#else
      uint32_t w;
      std::memcpy(&w, ptr(mn, k), sizeof w);
      return w;
#endif
    } else {
      return uint32_t(at(mn, k)) | (uint32_t(at(mn, k + 1)) << 16);
    }
  }
};

// fp16 bits to float (the FMA tile's 16-bit loads and the emulated instructions).
__device__ inline float f16_bits_to_float(uint16_t bits) {
#if defined(__CUDACC__) || defined(__HIP__)
  return __half2float(__ushort_as_half(bits));
#else
  return __half2float(__half{bits});
#endif
}

__device__ inline float in_to_float(float v) {
  return v;
}
__device__ inline float in_to_float(uint16_t v) {
  return f16_bits_to_float(v);
}

// Loads of a matrix op from its lane layout: register p of `lane` holds the pair (mn, k),
// (mn, k + 1) that Op::a_coord / b_coord name, relative to the tile's corner.
template <typename Op, typename View>
__device__ inline void load_pairs_a(typename Op::FragA& f, const View& v, int m0, int k0,
                                    int lane) {
  KILN_UNROLL
  for (int p = 0; p < Op::kRegsA; ++p) {
    int m, k;
    Op::a_coord(lane, p, m, k);
    f.r[p] = v.pair(m0 + m, k0 + k);
  }
}
template <typename Op, typename View>
__device__ inline void load_pairs_b(typename Op::FragB& f, const View& v, int n0, int k0,
                                    int lane) {
  KILN_UNROLL
  for (int p = 0; p < Op::kRegsB; ++p) {
    int n, k;
    Op::b_coord(lane, p, n, k);
    f.r[p] = v.pair(n0 + n, k0 + k);
  }
}

#if defined(KILN_EMU_MMA)
// The host emulation of a matrix instruction (tests/gpu_emu): every lane's registers gathered
// (kiln_emu::wave_gather) into whole A and B tiles by the op's own lane layout, and each lane's
// accumulators computed from them.
template <typename Op>
__device__ inline void emulate_mma(float (&acc)[Op::kAcc], const typename Op::FragA& fa,
                                   const typename Op::FragB& fb) {
  struct Regs {
    typename Op::FragA a;
    typename Op::FragB b;
  };
  Regs all[KILN_WARP_SIZE];
  kiln_emu::wave_gather(Regs{fa, fb}, all);
  float a[Op::kM][Op::kK], b[Op::kN][Op::kK];
  auto half_of = [](uint32_t w, int h) {
    return f16_bits_to_float(static_cast<uint16_t>(h ? w >> 16 : w & 0xffffu));
  };
  for (int src = 0; src < KILN_WARP_SIZE; ++src) {
    for (int p = 0; p < Op::kRegsA; ++p) {
      int m, k;
      Op::a_coord(src, p, m, k);
      a[m][k] = half_of(all[src].a.r[p], 0);
      a[m][k + 1] = half_of(all[src].a.r[p], 1);
    }
    for (int p = 0; p < Op::kRegsB; ++p) {
      int n, k;
      Op::b_coord(src, p, n, k);
      b[n][k] = half_of(all[src].b.r[p], 0);
      b[n][k + 1] = half_of(all[src].b.r[p], 1);
    }
  }
  const int lane = static_cast<int>(threadIdx.x % KILN_WARP_SIZE);
  for (int i = 0; i < Op::kAcc; ++i) {
    int r, c;
    Op::acc_coord(lane, i, r, c);
    float s = 0.f;
    for (int k = 0; k < Op::kK; ++k) s += a[r][k] * b[c][k];
    acc[i] += s;
  }
}
#endif

// NVIDIA mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (sm_80+), a warp of 32. With
// g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): A register p
// holds row g + 8 (p & 1), k 2t + 8 (p >> 1) and k + 1; B register p holds column g, k 2t + 8p
// and k + 1; accumulator i is row g + 8 (i >> 1), column 2t + (i & 1).
struct MmaSm80F16 {
  using In = uint16_t;
  static constexpr int kM = 16, kN = 8, kK = 16, kAcc = 4, kRegsA = 4, kRegsB = 2;
  static constexpr int kAccRowLanes = 4;  // lanes 4g .. 4g + 3 hold rows g and g + 8
  static constexpr int kAccLaneRows = 2;
  __device__ static constexpr int acc_lane_row(int i) { return i >> 1; }
  struct FragA {
    uint32_t r[kRegsA];
  };
  struct FragB {
    uint32_t r[kRegsB];
  };
  __device__ static void a_coord(int lane, int p, int& m, int& k) {
    m = lane / 4 + 8 * (p & 1);
    k = 2 * (lane % 4) + 8 * (p >> 1);
  }
  __device__ static void b_coord(int lane, int p, int& n, int& k) {
    n = lane / 4;
    k = 2 * (lane % 4) + 8 * p;
  }
  __device__ static void acc_coord(int lane, int i, int& row, int& col) {
    row = lane / 4 + 8 * (i >> 1);
    col = 2 * (lane % 4) + (i & 1);
  }
  // From a view with addresses (SwizzledOperand): ldmatrix, one instruction for the whole
  // fragment, its four 8 x 8 matrices in the order of the registers (a_coord / b_coord), each
  // lane naming one 8-element row. A k-contiguous operand is stored [mn][k] (matrices are
  // rows mn, columns k: no transpose); an mn-contiguous one [k][mn] (rows k: transposed).
  // Other views: one 32-bit load per register from the lane layout.
  template <typename View>
  __device__ static void load_a(FragA& f, const View& v, int m0, int k0, int lane) {
    if constexpr (requires(const View& w) { w.ptr(0, 0); }) {
      const int i = lane / 8, j = lane % 8;  // matrix i (register i), its row j
      if constexpr (View::kKContiguous) {
        ldmatrix_x4<false>(f.r, v.ptr(m0 + j + 8 * (i & 1), k0 + 8 * (i >> 1)));
      } else {
        ldmatrix_x4<true>(f.r, v.ptr(m0 + 8 * (i & 1), k0 + j + 8 * (i >> 1)));
      }
    } else {
      load_pairs_a<MmaSm80F16>(f, v, m0, k0, lane);
    }
  }
  template <typename View>
  __device__ static void load_b(FragB& f, const View& v, int n0, int k0, int lane) {
    if constexpr (requires(const View& w) { w.ptr(0, 0); }) {
      const int i = (lane / 8) & 1, j = lane % 8;  // x2: lanes 16..31 repeat 0..15
      if constexpr (View::kKContiguous) {
        ldmatrix_x2<false>(f.r, v.ptr(n0 + j, k0 + 8 * i));
      } else {
        ldmatrix_x2<true>(f.r, v.ptr(n0, k0 + j + 8 * i));
      }
    } else {
      load_pairs_b<MmaSm80F16>(f, v, n0, k0, lane);
    }
  }
  // The fragments of two adjacent op tiles along n (n0 and n0 + 8) in one ldmatrix.x4: half the
  // B loads of a wavefront tile at least 16 wide. Its four matrices are (n tile, k half) in the
  // order of the registers: f0's two, then f1's.
  static constexpr bool kLoadsBPairs = true;
  template <typename View>
  __device__ static void load_b2(FragB& f0, FragB& f1, const View& v, int n0, int k0, int lane) {
    const int i = lane / 8, j = lane % 8;
    const int dn = 8 * (i >> 1), dk = 8 * (i & 1);
    uint32_t r[4];
    if constexpr (View::kKContiguous) {
      ldmatrix_x4<false>(r, v.ptr(n0 + dn + j, k0 + dk));
    } else {
      ldmatrix_x4<true>(r, v.ptr(n0 + dn, k0 + dk + j));
    }
    f0.r[0] = r[0], f0.r[1] = r[1], f1.r[0] = r[2], f1.r[1] = r[3];
  }
  // A product's accumulators as the A operand of the next one (flash attention's P V), without
  // shared memory: the A fragment of k-step st holds, register by register, the accumulators
  // of n tiles 2 st and 2 st + 1 at the same rows and columns (a_coord against acc_coord), each
  // pair rounded to float16. kAccFeedsA: an op whose layouts line up so.
  static constexpr bool kAccFeedsA = true;
  template <int Tiles>
  __device__ static void acc_to_a(FragA& f, const float (&acc)[Tiles][kAcc], int st) {
    KILN_UNROLL
    for (int p = 0; p < kRegsA; ++p) {
      const float* c = acc[2 * st + (p >> 1)] + 2 * (p & 1);
      f.r[p] = uint32_t{__half_as_ushort(__float2half(c[0]))} |
               uint32_t{__half_as_ushort(__float2half(c[1]))} << 16;
    }
  }
  __device__ static void mma(float (&c)[kAcc], const FragA& a, const FragB& b) {
#if defined(KILN_EMU_MMA)
    emulate_mma<MmaSm80F16>(c, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
#else
    // Another pass (the host's, or an arch this op is never launched on): no instruction.
    (void)c, (void)a, (void)b;
#endif
  }
};

// AMD CDNA v_mfma_f32_16x16x16f16 (gfx908, gfx90a, gfx940), a wavefront of 64. With r = lane % 16
// and q = lane / 16 (AMD's matrix instruction tables): A register p holds row r, k 4q + 2p and
// k + 1; B register p holds column r, k 4q + 2p and k + 1; accumulator i is row 4q + i,
// column r.
struct MfmaF16 {
  using In = uint16_t;
  static constexpr int kM = 16, kN = 16, kK = 16, kAcc = 4, kRegsA = 2, kRegsB = 2;
  static constexpr bool kLoadsBPairs = false;
  static constexpr int kAccRowLanes = 16;  // lanes 16q .. 16q + 15 hold rows 4q .. 4q + 3
  static constexpr int kAccLaneRows = 4;
  __device__ static constexpr int acc_lane_row(int i) { return i; }
  struct FragA {
    uint32_t r[kRegsA];
  };
  struct FragB {
    uint32_t r[kRegsB];
  };
  __device__ static void a_coord(int lane, int p, int& m, int& k) {
    m = lane % 16;
    k = 4 * (lane / 16) + 2 * p;
  }
  __device__ static void b_coord(int lane, int p, int& n, int& k) {
    n = lane % 16;
    k = 4 * (lane / 16) + 2 * p;
  }
  __device__ static void acc_coord(int lane, int i, int& row, int& col) {
    row = 4 * (lane / 16) + i;
    col = lane % 16;
  }
  template <typename View>
  __device__ static void load_a(FragA& f, const View& v, int m0, int k0, int lane) {
    load_pairs_a<MfmaF16>(f, v, m0, k0, lane);
  }
  template <typename View>
  __device__ static void load_b(FragB& f, const View& v, int n0, int k0, int lane) {
    load_pairs_b<MfmaF16>(f, v, n0, k0, lane);
  }
  __device__ static void mma(float (&c)[kAcc], const FragA& a, const FragB& b) {
#if defined(KILN_EMU_MMA)
    emulate_mma<MfmaF16>(c, a, b);
#elif defined(__HIP__) && (defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__))
    // _Float16 exists only in AMD's device code (see vendor.hpp).
    typedef _Float16 half4 __attribute__((ext_vector_type(4)));
    typedef float float4_ __attribute__((ext_vector_type(4)));
    half4 va = __builtin_bit_cast(half4, a);
    half4 vb = __builtin_bit_cast(half4, b);
    float4_ vc = {c[0], c[1], c[2], c[3]};
    vc = __builtin_amdgcn_mfma_f32_16x16x16f16(va, vb, vc, 0, 0, 0);
    c[0] = vc[0], c[1] = vc[1], c[2] = vc[2], c[3] = vc[3];
#else
    (void)c, (void)a, (void)b;
#endif
  }
};

// Plain FMA for any wavefront size: a 16 x 16 tile, lane l holding column l % 16 of rows
// l / 16 + e (W / 16) for e < 256 / W (W the wavefront size). kK = 2: each step reads two k.
template <typename S>
struct FmaTile {
  using In = S;
  static constexpr int kLaneRows = 16 / (KILN_WARP_SIZE / 16);
  static constexpr int kM = 16, kN = 16, kK = 2, kAcc = kLaneRows;
  static constexpr bool kLoadsBPairs = false;
  static constexpr int kAccRowLanes = 16;
  static constexpr int kAccLaneRows = kLaneRows;
  __device__ static constexpr int acc_lane_row(int i) { return i; }
  struct FragA {
    float v[kLaneRows][kK];
  };
  struct FragB {
    float v[kK];
  };
  __device__ static void acc_coord(int lane, int i, int& row, int& col) {
    row = lane / 16 + i * (KILN_WARP_SIZE / 16);
    col = lane % 16;
  }
  template <typename View>
  __device__ static void load_a(FragA& f, const View& v, int m0, int k0, int lane) {
    KILN_UNROLL
    for (int e = 0; e < kLaneRows; ++e) {
      KILN_UNROLL
      for (int k = 0; k < kK; ++k) {
        f.v[e][k] = in_to_float(v.at(m0 + lane / 16 + e * (KILN_WARP_SIZE / 16), k0 + k));
      }
    }
  }
  template <typename View>
  __device__ static void load_b(FragB& f, const View& v, int n0, int k0, int lane) {
    KILN_UNROLL
    for (int k = 0; k < kK; ++k) f.v[k] = in_to_float(v.at(n0 + lane % 16, k0 + k));
  }
  __device__ static void mma(float (&c)[kAcc], const FragA& a, const FragB& b) {
    KILN_UNROLL
    for (int e = 0; e < kLaneRows; ++e) {
      KILN_UNROLL
      for (int k = 0; k < kK; ++k) c[e] = fmaf(a.v[e][k], b.v[k], c[e]);
    }
  }
};

// Whether Op::acc_to_a exists (MmaSm80F16 only).
template <typename Op>
constexpr bool acc_feeds_a = requires {
  requires Op::kAccFeedsA;
};

template <typename Op>
constexpr bool is_fma_tile = false;
template <typename S>
constexpr bool is_fma_tile<FmaTile<S>> = true;

// The matrix tile for 16-bit inputs of the target being compiled; FmaTile where it has none
// (the host pass, gfx1030: kernels asking for matrix tiles are never launched there).
#if defined(KILN_EMU_MMA) && KILN_WARP_SIZE == 32
using MatrixTileF16 = MmaSm80F16;
#elif defined(KILN_EMU_MMA) && KILN_WARP_SIZE == 64
using MatrixTileF16 = MfmaF16;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
using MatrixTileF16 = MmaSm80F16;
#elif defined(__HIP__) && (defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__))
using MatrixTileF16 = MfmaF16;
#else
using MatrixTileF16 = FmaTile<uint16_t>;
#endif

}  // namespace kiln::backends::gpu::kernels
