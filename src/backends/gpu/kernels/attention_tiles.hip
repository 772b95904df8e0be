// Fused attention on matrix-instruction tiles: the forward pass of flash attention written over
// mma_tile.hpp's tile ops, so one source serves mma.sync (NVIDIA) and MFMA (CDNA). float16,
// head sizes D = Dv in kAttentionTileHeads.
//
// A block takes one batch entry and 16 queries (one tile row, Op::kM) per wavefront. Each
// wavefront keeps its queries' Q fragments in registers. For each tile of kKeys keys the block
// stages K and V in shared memory; each wavefront computes its 16 x kKeys scores S = Q K^T in
// accumulators, scales and masks them, updates its rows' running max and sum (a row's entries
// lie in Op::acc_lane_row's accumulators of Op::kAccRowLanes neighbouring lanes, reduced by
// shuffles), writes P = exp(S - max) as
// float16 to its own slice of shared memory and accumulates O += P V. Nothing of size sq x sk is
// stored, and S and O never leave registers.
//
// Numerics as the FMA kernel (attention.hip), except that P is rounded to float16 before the
// product with V (as flash attention does); its row sums add the unrounded values.
#include <cmath>

#include "backends/gpu/kernels/attention.hpp"
#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/mma_tile.hpp"
#include "backends/gpu/kernels/tile_copy.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

using Op = MatrixTileF16;

// A staged tile whose rows lie `stride` elements apart, padded so that consecutive rows start 16
// bytes apart on different banks, seen as op[mn][k] as SmemOperand; ptr() gives element
// addresses, so the NVIDIA tile loads it with ldmatrix (rows and the stride in whole 16 bytes).
template <typename S, bool KContiguous>
struct PaddedOperand {
  static constexpr bool kKContiguous = KContiguous;
  const S* data;
  int stride;

  __device__ const S* ptr(int mn, int k) const {
    return KContiguous ? data + mn * stride + k : data + k * stride + mn;
  }
  __device__ S at(int mn, int k) const { return *ptr(mn, k); }
  __device__ uint32_t pair(int mn, int k) const {
    return SmemOperand<S, KContiguous>{data, stride}.pair(mn, k);
  }
};

// Wavefronts a block: at most 4 (8 and 2 were both slower on BERT-base b32 on the H100:
// bench/results/2026-12-06b-gpu-h100-wgmma.md), fewer when the grid would not fill the device.
constexpr int kMaxWaves = 4;
// Blocks a multiprocessor should hold, heads up to 64 (NVIDIA's launch bound caps the
// registers at 128 a thread for it: at 145, three blocks of 4 warps fitted, 18.75 % occupancy,
// and the kernel waited on latency; Nsight Compute, same file). Head 128 keeps its registers
// (capped at 128 it spilled 820 bytes).
template <int D>
[[maybe_unused]] constexpr int kMinBlocksFor = D <= 64 ? 4 : 1;
// Elements after each staged row (16 bytes): the rows a tile op's lanes (or one ldmatrix) read at
// the same column fall on different banks, and every row starts 16 bytes aligned.
constexpr int kPad = 8;
// Keys per staged tile: two tiles of K and V (one being multiplied, the next one in flight) and
// the wavefronts' P stay under 48 KiB (a block's static limit, and within AMD's 64 KiB LDS).
template <int D>
constexpr int kKeysFor = D <= 64 ? 64 : 32;

// Whether P stays in registers (acc_feeds_a) on every device target of this build: NVIDIA's
// (sm_80+: mma.sync) and the 32-lane emulation of it; AMD's MFMA hands P over through shared
// memory. The host pass, whose Op is not the device's, sizes the launch's shared memory by it.
#if defined(__CUDACC__) || (defined(KILN_EMU_MMA) && KILN_WARP_SIZE == 32)
constexpr bool kPInRegisters = true;
#else
constexpr bool kPInRegisters = false;
#endif

// The block's shared memory: two stages of K [keys][D + kPad] and V [keys][DV + kPad], then each
// wavefront's P [kM][keys + kPad] where it does not stay in registers, then (a staged mask) two
// stages of the mask's rows for the block's queries [mask_rows][keys + kPad].
template <int D, int DV>
constexpr size_t shared_bytes(int waves, int mask_rows = 0) {
  constexpr int keys = kKeysFor<D>;
  const size_t p = kPInRegisters ? 0 : static_cast<size_t>(waves) * Op::kM * (keys + kPad);
  const size_t m = 2 * static_cast<size_t>(mask_rows) * (keys + kPad);
  return sizeof(uint16_t) * (2 * static_cast<size_t>(keys) * (D + kPad + DV + kPad) + p + m);
}
static_assert(shared_bytes<128, 128>(kMaxWaves) <= 48 * 1024 &&
              shared_bytes<64, 64>(kMaxWaves) <= 48 * 1024);

// Rows row0 .. row0 + rows of a float16 matrix of Cols columns whose rows lie src_row elements
// apart into shared memory with row stride Cols + kPad, 16 bytes a copy; rows at or past `valid`,
// and columns at or past `valid_cols` (a multiple of 8: the mask's last key tile), are zeros (a
// zero V row times a zero probability must stay 0, never NaN). `commit`: close the group of
// copies issued since the last commit.
template <int Cols>
__device__ inline void stage_rows(uint16_t* dst, const __half* src, int64_t src_row, int64_t row0,
                                  int64_t valid, int rows, bool commit, int64_t valid_cols = Cols) {
  constexpr int kChunks = Cols / 8;
  // One 64-bit offset a call; the loop's rows and columns stay 32-bit (integer work per copy was
  // a visible share of the kernel's instructions).
  const __half* base = src + row0 * src_row;
  const int valid_rows = valid < rows ? static_cast<int>(valid) : rows;
  for (int i = static_cast<int>(threadIdx.x); i < rows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = (i - r * kChunks) * 8;
    uint16_t* to = dst + r * (Cols + kPad) + c;
    if (r < valid_rows && c < valid_cols) {
      copy_async_16(to, base + r * src_row + c);
    } else {
      copy_16(to, Bytes16{});
    }
  }
  if (commit) copy_async_commit();
}

// The reduction of v over the lanes that hold the same accumulator row.
template <typename F>
__device__ inline float row_reduce(float v, F op) {
  KILN_UNROLL
  for (int mask = 1; mask < Op::kAccRowLanes; mask *= 2) v = op(v, __shfl_xor(v, mask));
  return v;
}

// Whether the target being compiled launches this kernel: where MatrixTileF16 is the FMA tile
// (gfx1030; the host pass, which compiles no device code) the runtime never takes it
// (has_matrix_tiles), so its body is left out there instead of being built with FMA tiles.
#if defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
constexpr bool kTilesHere = !is_fma_tile<MatrixTileF16>;
#else
constexpr bool kTilesHere = true;
#endif

// The row maximum of the online softmax. fmaxf drops a NaN score from the maximum, but the NaN
// still reaches its row: exp2(NaN - max) is NaN, so the row's sum and output are NaN (or 0 with
// zero_nan_probs), as the reference's. One instruction where MaxOp takes three.
struct FiniteMaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The B fragments of n tiles n0 and n0 + kN in one load (where the op has load_b2; a template,
// so that the call is checked only for such ops).
template <typename O, typename View>
__device__ inline void b_fragments(typename O::FragB& f0, typename O::FragB& f1, const View& v,
                                   int n0, int k0, int lane) {
  if constexpr (O::kLoadsBPairs) O::load_b2(f0, f1, v, n0, k0, lane);
}

// P's A fragment of k-step st from the score accumulators (where the op has acc_to_a; a
// template, so that the call is checked only for such ops).
template <typename O, int Tiles>
__device__ inline void p_fragment(typename O::FragA& f, const float (&acc)[Tiles][O::kAcc],
                                  int st) {
  if constexpr (acc_feeds_a<O>) O::acc_to_a(f, acc, st);
}

// How a launch's additive mask is read, chosen by the launcher: absent; staged, where its rows
// (one row of keys for every query, or one a query: BERT's exported [batch, 1, sq, sk]) can be
// copied 16 bytes at a time, into shared memory with each key tile, so that the scores wait on
// no global load (per-score global loads were where the kernel's warps stalled: Nsight Compute
// source counters, bench/results/2026-12-06c-gpu-attention.md); per key, a value a query and key
// read from global memory (offsets within a tile are constants the loads carry); or per row, one
// value a query row (keys dimension 1), read once a task. A template, so that each kind's key
// loop holds only its own work.
enum class MaskKind { kNone, kStaged, kPerKey, kPerRow };

template <int D, int DV, MaskKind Mask>
__device__ inline void attention_tiles(const AttentionArgs& a) {
  constexpr int kKeys = kKeysFor<D>;
  constexpr int kPStride = kKeys + kPad;
  static_assert(D % Op::kK == 0 && DV % Op::kN == 0 && kKeys % Op::kN == 0 && kKeys % Op::kK == 0 &&
                D % 8 == 0 && DV % 8 == 0);
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(KILN_EMU_MMA)
  static_assert(acc_feeds_a<Op> == kPInRegisters, "the launch sized P's shared memory otherwise");
#endif
  constexpr int kQSteps = D / Op::kK;      // k-steps of Q K^T
  constexpr int kSTiles = kKeys / Op::kN;  // score tiles of a key tile
  constexpr int kOTiles = DV / Op::kN;     // output tiles
  constexpr int kPSteps = kKeys / Op::kK;  // k-steps of P V
  constexpr int kKElems = kKeys * (D + kPad), kVElems = kKeys * (DV + kPad);
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int kStageElems = kKElems + kVElems;
  KILN_DYNAMIC_SHARED(uint16_t, smem);
  // Stage s: K then V at smem + s kStageElems. Q's rows go to the second stage first (the
  // first key tile's copies into the first stage are then already in flight).
  static_assert(kMaxWaves * Op::kM * (D + kPad) <= kStageElems);
  const int lane = static_cast<int>(threadIdx.x) % KILN_WARP_SIZE;
  const int wave = static_cast<int>(threadIdx.x) / KILN_WARP_SIZE;
  const int waves = static_cast<int>(blockDim.x) / KILN_WARP_SIZE;
  uint16_t* ps = smem + 2 * kStageElems + wave * Op::kM * kPStride;  // [kM][kPStride]
  // kStaged: the mask's two stages after the wavefronts' P, [mask_rows][kPStride] each.
  const int mask_rows = a.msq == 1 ? 1 : waves * Op::kM;
  uint16_t* const mask_stages =
      smem + 2 * kStageElems + (kPInRegisters ? 0 : waves * Op::kM * kPStride);
  const __half* q = static_cast<const __half*>(a.q);
  const __half* k = static_cast<const __half*>(a.k);
  const __half* v = static_cast<const __half*>(a.v);
  const __half* mask = static_cast<const __half*>(a.mask);
  __half* out = static_cast<__half*>(a.out);
  const int block_rows = waves * Op::kM;
  const int64_t tiles = (a.sq + block_rows - 1) / block_rows;
  const int64_t key_tiles = (a.sk + kKeys - 1) / kKeys;

  for (int64_t task = blockIdx.x; task < a.batches * tiles; task += gridDim.x) {
    const int64_t b = task / tiles;
    const int64_t q0 = (task - b * tiles) * block_rows;
    int64_t m[4];
    strided_offsets<int64_t, 4>(a.batch, b, m);
    const __half* qm = q + m[0];
    const __half* km = k + m[1];
    const __half* vm = v + m[2];
    const __half* mm = mask ? mask + m[3] : nullptr;
    // Key tile t's copies into stage t % 2 (one commit).
    auto stage_keys = [&](int64_t t) {
      const int64_t k0 = t * kKeys;
      uint16_t* stage = smem + (t % 2) * kStageElems;
      stage_rows<D>(stage, km, a.k_row, k0, a.sk - k0, kKeys, false);
      if constexpr (Mask == MaskKind::kStaged) {
        // The mask's rows for this block's queries (its one row where msq = 1) at keys k0 ..
        // k0 + kKeys. sk is a multiple of 8 here (the launcher checked msk = sk), so no chunk
        // straddles it; rows past sq and keys past sk are zeros (never stored / scored -inf).
        const bool one_row = a.msq == 1;
        stage_rows<kKeys>(mask_stages + (t % 2) * mask_rows * kPStride, mm + k0,
                          one_row ? 0 : a.msk, one_row ? 0 : q0, one_row ? 1 : a.sq - q0, mask_rows,
                          false, a.sk - k0);
      }
      stage_rows<DV>(stage + kKElems, vm, a.v_row, k0, a.sk - k0, kKeys, true);
    };

    __syncthreads();  // the previous task's readers of every stage are done
    stage_rows<D>(smem + kStageElems, qm, a.q_row, q0, a.sq - q0, block_rows, true);
    if (key_tiles > 0) {
      stage_keys(0);
      copy_async_wait<1>();  // Q landed; the first key tile may still be in flight
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();
    typename Op::FragA qf[kQSteps];
    const PaddedOperand<uint16_t, true> q_view{smem + kStageElems + wave * Op::kM * (D + kPad),
                                               D + kPad};
    KILN_UNROLL
    for (int s = 0; s < kQSteps; ++s) Op::load_a(qf[s], q_view, 0, s * Op::kK, lane);

    // Softmax state per row of the lane (Op::acc_lane_row), the output per accumulator. `top`
    // is the running maximum in log2 units (scores times log2 e), so exp2 serves.
    constexpr int kRows = Op::kAccLaneRows;
    float top[kRows], total[kRows], o[kOTiles][Op::kAcc];
    KILN_UNROLL
    for (int r = 0; r < kRows; ++r) {
      top[r] = -INFINITY;
      total[r] = 0.f;
    }
    KILN_UNROLL
    for (int i = 0; i < Op::kAcc; ++i) {
      KILN_UNROLL
      for (int t = 0; t < kOTiles; ++t) o[t][i] = 0.f;
    }

    // Each accumulator row's mask row, set up once per task: the inner loop then adds a key
    // (times 0 for a mask broadcast over keys) instead of recomputing a 64-bit row offset per
    // score (the integer pipe was the kernel's busiest: Nsight Compute, 2026-12-06).
    const __half* mask_row[kRows];
    float row_bias[kRows];  // kPerRow: the row's mask value in log2 units
    if constexpr (Mask == MaskKind::kPerKey || Mask == MaskKind::kPerRow) {
      KILN_UNROLL
      for (int i = 0; i < Op::kAcc; ++i) {
        int r, c;
        Op::acc_coord(lane, i, r, c);
        int64_t row = q0 + wave * Op::kM + r;
        row = row < a.sq ? row : a.sq - 1;  // rows past sq are computed, never stored
        mask_row[Op::acc_lane_row(i)] = mm + (a.msq == 1 ? 0 : row) * a.msk;
      }
    }
    if constexpr (Mask == MaskKind::kPerRow) {
      KILN_UNROLL
      for (int r = 0; r < kRows; ++r) row_bias[r] = to_float(*mask_row[r]) * kLog2e;
    }
    // The scale in log2 units, so that exp2 serves; a mask value is scaled by log2 e alone.
    const float scale_log2 = a.scale * kLog2e;

    KILN_NO_UNROLL
    for (int64_t t = 0; t < key_tiles; ++t) {
      const int64_t k0 = t * kKeys;
      // Every wavefront done with tile t - 1 (and Q's fragments), whose stage the copies of
      // tile t + 1 refill.
      __syncthreads();
      if (t + 1 < key_tiles) {
        stage_keys(t + 1);
        copy_async_wait<1>();
      } else {
        copy_async_wait<0>();
      }
      __syncthreads();  // tile t visible to every thread
      const uint16_t* ks = smem + (t % 2) * kStageElems;
      const uint16_t* vs = ks + kKElems;

      float s[kSTiles][Op::kAcc];
      const PaddedOperand<uint16_t, true> k_view{ks, D + kPad};
      KILN_UNROLL
      for (int j = 0; j < kSTiles; ++j) {
        KILN_UNROLL
        for (int i = 0; i < Op::kAcc; ++i) s[j][i] = 0.f;
      }
      KILN_UNROLL
      for (int st = 0; st < kQSteps; ++st) {
        if constexpr (Op::kLoadsBPairs && kSTiles % 2 == 0) {
          // Two score tiles' K fragments in one load.
          KILN_UNROLL
          for (int j = 0; j < kSTiles; j += 2) {
            typename Op::FragB k0, k1;
            b_fragments<Op>(k0, k1, k_view, j * Op::kN, st * Op::kK, lane);
            Op::mma(s[j], qf[st], k0);
            Op::mma(s[j + 1], qf[st], k1);
          }
        } else {
          KILN_UNROLL
          for (int j = 0; j < kSTiles; ++j) {
            typename Op::FragB kb;
            Op::load_b(kb, k_view, j * Op::kN, st * Op::kK, lane);
            Op::mma(s[j], qf[st], kb);
          }
        }
      }
      // Scale and mask into log2 units, keys past sk -inf, and each row's maximum. Column
      // offsets are 32-bit within the tile; a mask value is read only for a key below sk.
      const int valid = a.sk - k0 < kKeys ? static_cast<int>(a.sk - k0) : kKeys;
      const __half* mask_tile[kRows];
      if constexpr (Mask == MaskKind::kPerKey) {
        KILN_UNROLL
        for (int r = 0; r < kRows; ++r) mask_tile[r] = mask_row[r] + k0;
      } else if constexpr (Mask == MaskKind::kStaged) {
        const __half* stage =
            reinterpret_cast<const __half*>(mask_stages + (t % 2) * mask_rows * kPStride);
        KILN_UNROLL
        for (int i = 0; i < Op::kAcc; ++i) {
          int r, c;
          Op::acc_coord(lane, i, r, c);
          mask_tile[Op::acc_lane_row(i)] = stage + (a.msq == 1 ? 0 : wave * Op::kM + r) * kPStride;
        }
      }
      float new_top[kRows], base[kRows], rescale[kRows], sum[kRows];
      KILN_UNROLL
      for (int r = 0; r < kRows; ++r) new_top[r] = -INFINITY;
      KILN_UNROLL
      for (int j = 0; j < kSTiles; ++j) {
        KILN_UNROLL
        for (int i = 0; i < Op::kAcc; ++i) {
          int r, c;
          Op::acc_coord(lane, i, r, c);
          const int col = j * Op::kN + c;
          const int row = Op::acc_lane_row(i);
          float x = -INFINITY;
          if (col < valid) {
            x = s[j][i] * scale_log2;
            if constexpr (Mask == MaskKind::kPerKey || Mask == MaskKind::kStaged) {
              x = fmaf(to_float(mask_tile[row][col]), kLog2e, x);
            } else if constexpr (Mask == MaskKind::kPerRow) {
              x += row_bias[row];
            }
          }
          s[j][i] = x;
          new_top[row] = FiniteMaxOp{}(new_top[row], x);
        }
      }
      // Online softmax, per row. A row with no finite score so far takes 0 as its base, so
      // its -inf scores give exp2(-inf) = 0 and never -inf - -inf = NaN.
      KILN_UNROLL
      for (int r = 0; r < kRows; ++r) {
        new_top[r] = fmaxf(top[r], row_reduce(new_top[r], FiniteMaxOp{}));
        base[r] = new_top[r] == -INFINITY ? 0.f : new_top[r];
        rescale[r] = fast_exp2(top[r] - base[r]);
        sum[r] = 0.f;
      }
      KILN_UNROLL
      for (int j = 0; j < kSTiles; ++j) {
        KILN_UNROLL
        for (int i = 0; i < Op::kAcc; ++i) {
          const int r = Op::acc_lane_row(i);
          s[j][i] = fast_exp2(s[j][i] - base[r]);
          sum[r] += s[j][i];
        }
      }
      KILN_UNROLL
      for (int r = 0; r < kRows; ++r) {
        total[r] = total[r] * rescale[r] + row_reduce(sum[r], SumOp{});
        top[r] = new_top[r];
      }
      KILN_UNROLL
      for (int i = 0; i < Op::kAcc; ++i) {
        KILN_UNROLL
        for (int t = 0; t < kOTiles; ++t) o[t][i] *= rescale[Op::acc_lane_row(i)];
      }
      // O += P V, P rounded to float16: straight from the accumulators where the op's layouts
      // allow (NVIDIA), else through the wavefront's slice of shared memory.
      const PaddedOperand<uint16_t, false> v_view{vs, DV + kPad};
      if constexpr (acc_feeds_a<Op>) {
        KILN_UNROLL
        for (int st = 0; st < kPSteps; ++st) {
          typename Op::FragA pa;
          p_fragment<Op>(pa, s, st);
          if constexpr (Op::kLoadsBPairs && kOTiles % 2 == 0) {
            KILN_UNROLL
            for (int t = 0; t < kOTiles; t += 2) {
              typename Op::FragB v0, v1;
              b_fragments<Op>(v0, v1, v_view, t * Op::kN, st * Op::kK, lane);
              Op::mma(o[t], pa, v0);
              Op::mma(o[t + 1], pa, v1);
            }
          } else {
            KILN_UNROLL
            for (int t = 0; t < kOTiles; ++t) {
              typename Op::FragB vb;
              Op::load_b(vb, v_view, t * Op::kN, st * Op::kK, lane);
              Op::mma(o[t], pa, vb);
            }
          }
        }
      } else {
        __half* ph = reinterpret_cast<__half*>(ps);
        KILN_UNROLL
        for (int j = 0; j < kSTiles; ++j) {
          KILN_UNROLL
          for (int i = 0; i < Op::kAcc; ++i) {
            int r, c;
            Op::acc_coord(lane, i, r, c);
            ph[r * kPStride + j * Op::kN + c] = from_float<__half>(s[j][i]);
          }
        }
        __syncthreads();  // every lane's P is in shared memory (the loop is uniform: all reach it)
        const PaddedOperand<uint16_t, true> p_view{ps, kPStride};
        KILN_UNROLL
        for (int st = 0; st < kPSteps; ++st) {
          typename Op::FragA pa;
          Op::load_a(pa, p_view, 0, st * Op::kK, lane);
          KILN_UNROLL
          for (int t = 0; t < kOTiles; ++t) {
            typename Op::FragB vb;
            Op::load_b(vb, v_view, t * Op::kN, st * Op::kK, lane);
            Op::mma(o[t], pa, vb);
          }
        }
      }
    }

    // A row's probabilities are all finite (total > 0) or all NaN (0 / 0, or a NaN score in the
    // sum): zero_nan_probs makes the NaN ones 0, so that row sums to 0.
    // One reciprocal a row (total >= 1 where any score is finite: the maximum contributes
    // exp2(0); 0 gives inf and 0 * inf = NaN, as 0 / 0 did).
    float inv[kRows];
    bool zero[kRows];
    KILN_UNROLL
    for (int r = 0; r < kRows; ++r) {
      zero[r] = a.zero_nan_probs && !(total[r] > 0.f);
      inv[r] = 1.f / total[r];
    }
    __half* const out_task =
        out + (b / a.out_heads) * a.sq * a.out_heads * DV + (b % a.out_heads) * DV;
    KILN_UNROLL
    for (int i = 0; i < Op::kAcc; ++i) {
      int r, c;
      Op::acc_coord(lane, i, r, c);
      const int64_t row = q0 + wave * Op::kM + r;
      if (row >= a.sq) continue;
      const float scale = inv[Op::acc_lane_row(i)];
      const bool zeros = zero[Op::acc_lane_row(i)];
      __half* orow = out_task + row * a.o_row;
      KILN_UNROLL
      for (int t = 0; t < kOTiles; ++t)
        orow[t * Op::kN + c] = from_float<__half>(zeros ? 0.f : o[t][i] * scale);
    }
  }
}

// HIP's second launch bound means something else (waves per execution unit): AMD gets the
// thread count alone.
#if defined(__HIP__)
#define KILN_ATTENTION_BOUNDS __launch_bounds__(kMaxWaves* KILN_WARP_SIZE)
#else
#define KILN_ATTENTION_BOUNDS __launch_bounds__(kMaxWaves* KILN_WARP_SIZE, kMinBlocksFor<D>)
#endif

template <int D, int DV, MaskKind Mask>
__global__ void KILN_ATTENTION_BOUNDS attention_tiles_kernel(AttentionArgs a) {
  if constexpr (kTilesHere) {
    attention_tiles<D, DV, Mask>(a);
  } else {
    (void)a;
  }
}

// Shared memory a block may use: what one launch may ask for on NVIDIA after raising the
// kernel's limit (H100 / H200: 227 KiB; sm_80: 163 KiB), and AMD's 64 KiB of LDS a workgroup.
#if defined(__CUDACC__)
constexpr size_t kMaxSharedBytes = 96 * 1024;
#else
constexpr size_t kMaxSharedBytes = 64 * 1024;
#endif

// Whether the mask's rows can be staged (MaskKind::kStaged): one row for every query or one a
// query, each row's key tiles copied 16 bytes at a time (rows 16-byte aligned, sk a multiple of
// 8), within the block's shared memory.
template <int D>
bool mask_stages(const AttentionArgs& a, int waves) {
  if ((a.msq != 1 && a.msq != a.sq) || a.msk % 8 != 0 || !aligned16(a.mask)) return false;
  for (int d = 0; d < a.batch.rank; ++d)
    if (a.batch.strides[3][d] % 8 != 0) return false;
  const int rows = a.msq == 1 ? 1 : waves * Op::kM;
  return shared_bytes<D, D>(waves, rows) <= kMaxSharedBytes;
}

template <int D, MaskKind Mask>
hipError_t launch_kind(const AttentionArgs& a, dim3 grid, int waves, size_t bytes,
                       hipStream_t stream) {
  auto* kernel = &attention_tiles_kernel<D, D, Mask>;
#if defined(__CUDACC__)
  // Prefer the most shared memory a multiprocessor can give (the driver picked 132 KiB on the
  // H100: three blocks of 37 KiB), and allow a block past 48 KiB (a staged mask). Set once per
  // process and kernel, on the first launch's device.
  static const hipError_t attributes = [kernel] {
    const hipError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (e != hipSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kMaxSharedBytes));
  }();
  if (attributes != hipSuccess) return attributes;
#endif
  hipLaunchKernelGGL(kernel, grid, dim3(waves * KILN_WARP_SIZE), bytes, stream, a);
  return hipGetLastError();
}

template <int D>
hipError_t launch_head(const AttentionArgs& a, hipStream_t stream) {
  // Fewer queries a block when the grid would not cover the device twice (batch 1).
  const int64_t sms = a.multiprocessors > 0 ? a.multiprocessors : 1;
  auto tasks_for = [&](int waves) {
    return a.batches * ((a.sq + waves * Op::kM - 1) / (waves * Op::kM));
  };
  int waves = kMaxWaves;
  if (a.waves > 0) {
    waves = a.waves <= kMaxWaves ? a.waves : kMaxWaves;
  } else {
    while (waves > 1 && tasks_for(waves) < 2 * sms) waves /= 2;
  }
  const int64_t tasks = tasks_for(waves);
  const dim3 grid(static_cast<unsigned>(tasks < 65535 ? tasks : 65535));
  if (!a.mask)
    return launch_kind<D, MaskKind::kNone>(a, grid, waves, shared_bytes<D, D>(waves), stream);
  if (a.msk == 1) {
    return launch_kind<D, MaskKind::kPerRow>(a, grid, waves, shared_bytes<D, D>(waves), stream);
  }
  if (mask_stages<D>(a, waves)) {
    const size_t bytes = shared_bytes<D, D>(waves, a.msq == 1 ? 1 : waves * Op::kM);
    return launch_kind<D, MaskKind::kStaged>(a, grid, waves, bytes, stream);
  }
  return launch_kind<D, MaskKind::kPerKey>(a, grid, waves, shared_bytes<D, D>(waves), stream);
}

}  // namespace

bool attention_tiles_fit(const AttentionArgs& a) {
  if (a.d != a.dv || !aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v)) return false;
  // Every row of Q, K and V starts 16 bytes aligned: row strides and batch offsets in whole
  // 8-element chunks.
  if (a.q_row % 8 != 0 || a.k_row % 8 != 0 || a.v_row % 8 != 0) return false;
  for (int d = 0; d < a.batch.rank; ++d) {
    for (int op = 0; op < 3; ++op)
      if (a.batch.strides[op][d] % 8 != 0) return false;
  }
  for (int64_t head : kAttentionTileHeads)
    if (a.d == head) return true;
  return false;
}

hipError_t launch_attention_tiles(const AttentionArgs& a, hipStream_t stream) {
  switch (a.d) {
    case 32:
      return launch_head<32>(a, stream);
    case 64:
      return launch_head<64>(a, stream);
    case 128:
      return launch_head<128>(a, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace kiln::backends::gpu::kernels
