#pragma once
// Launcher of the fused attention kernel (attention.hip). Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// Largest head size (D and Dv) the kernel holds in shared memory and registers.
inline constexpr int64_t kAttentionMaxHead = 256;

// out[b] = softmax(Q[b] K[b]^T * scale + mask[b]) V[b] for each of `batches` batch entries
// (row-major over batch.dims; operands 0-3 of the walk give the matrix index of Q, K, V and the
// mask for each). Q [sq, d], K [sk, d], V [sk, dv], out [sq, dv], mask [msq, msk] with msq in
// {1, sq} and msk in {1, sk} (additive; null: none).
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* mask = nullptr;
  void* out = nullptr;
  int64_t batches = 0, sq = 0, sk = 0, d = 0, dv = 0, msq = 1, msk = 1;
  float scale = 1.f;
  // Probabilities that come out NaN count as 0 (the op's zero_nan_probs): a row masked
  // everywhere, or one with a NaN score, gives 0 instead of NaN.
  bool zero_nan_probs = false;
  StridedShape batch;
};

hipError_t launch_attention(FloatType type, const AttentionArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
