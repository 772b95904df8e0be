#pragma once
// Launcher of the fused attention kernel (attention.hip). Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// Largest head size (D and Dv) the kernel holds in shared memory and registers.
inline constexpr int64_t kAttentionMaxHead = 256;
// Head sizes (D = Dv) of the matrix-tile kernel (attention_tiles.hip, float16): the common ones
// (BERT, GPT-2 and ViT 64; LLaMA 128); others take the FMA kernel.
inline constexpr int64_t kAttentionTileHeads[] = {32, 64, 128};

// out[b] = softmax(Q[b] K[b]^T * scale + mask[b]) V[b] for each of `batches` batch entries
// (row-major over batch.dims). Q[b] is [sq, d] at element q + off[0] (operands 0-3 of the walk
// give each batch entry's element offset into Q, K, V and the mask), its rows q_row elements
// apart; K[b] [sk, d] and V[b] [sk, dv] likewise; the mask [msq, msk] with msq in {1, sq} and
// msk in {1, sk}, contiguous (additive; null: none). out[b] [sq, dv] starts at element
// (b / out_heads) * sq * out_heads * dv + (b % out_heads) * dv, rows o_row apart: dense
// [batch.., sq, dv] with out_heads 1 and o_row dv, or bsnh's [.., sq, heads, dv] with out_heads
// the heads and o_row heads * dv. runtime/attention_layout.hpp fills these from operand dims.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* mask = nullptr;
  void* out = nullptr;
  int64_t batches = 0, sq = 0, sk = 0, d = 0, dv = 0, msq = 1, msk = 1;
  int64_t q_row = 0, k_row = 0, v_row = 0, o_row = 0, out_heads = 1;
  float scale = 1.f;
  // Probabilities that come out NaN count as 0 (the op's zero_nan_probs): a row masked
  // everywhere, or one with a NaN score, gives 0 instead of NaN.
  bool zero_nan_probs = false;
  // The device has 16-bit matrix instructions the tile ops use (mma.sync, MFMA): float16 with a
  // head size of kAttentionTileHeads takes the matrix-tile kernel.
  bool matrix_tiles = false;
  int multiprocessors = 0;  // sizes the matrix-tile kernel's blocks (0: unknown)
  // The matrix-tile kernel's wavefronts a block (1 to 4); 0: its own choice by the grid's size.
  int waves = 0;
  StridedShape batch;
};

// The FMA kernel, or the matrix-tile one where it fits (matrix_tiles, float16,
// attention_tiles_fit).
hipError_t launch_attention(FloatType type, const AttentionArgs& args, hipStream_t stream);

// Whether the matrix-tile kernel takes these operands: D = Dv in kAttentionTileHeads, Q, K and V
// rows 16-byte aligned. Its launcher, float16 only.
bool attention_tiles_fit(const AttentionArgs& args);
hipError_t launch_attention_tiles(const AttentionArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
