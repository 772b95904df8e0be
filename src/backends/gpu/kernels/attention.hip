// Fused scaled dot-product attention, one pass over the keys with an online softmax: no score
// matrix is materialized, so memory stays O(tile) for any sequence length. A block takes one
// batch entry and as many consecutive queries as it has wavefronts (one query per wavefront);
// it stages a tile of keys and values in shared memory (fp32), each lane of a wavefront scores
// one key of the tile against the wavefront's query, the tile's running max and sum update the
// softmax state, and each lane accumulates its share of the Dv outputs. Plain FMA: the
// matrix-tile version is the next step.
#include <cmath>

#include "backends/gpu/kernels/attention.hpp"
#include "backends/gpu/kernels/device_common.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

// Most wavefronts a kBlock-thread block holds (wave32); sizes the per-wavefront scratch.
constexpr int kMaxWarps = kBlock / 32;

// Keys per staged tile: at most 32, so every key of a tile has a lane on either wavefront size.
int tile_keys(int64_t d, int64_t dv) {
  return (d + 1 + dv) * 32 + kMaxWarps * d <= 12 * 1024 ? 32 : 16;
}

size_t shared_bytes(int keys, int64_t d, int64_t dv) {
  // K tile padded to d + 1 columns (lanes read different keys' same column: no bank
  // conflicts), V tile, one query per wavefront.
  return sizeof(float) * static_cast<size_t>(keys * (d + 1) + keys * dv + kMaxWarps * d);
}

template <typename T>
__global__ void attention_kernel(AttentionArgs a, int keys) {
  KILN_DYNAMIC_SHARED(float, smem);
  float* ks = smem;                   // [keys][d + 1]
  float* vs = ks + keys * (a.d + 1);  // [keys][dv]
  float* qs_all = vs + keys * a.dv;   // [warps][d]
  const int lane = threadIdx.x % KILN_WARP_SIZE;
  const int warp = threadIdx.x / KILN_WARP_SIZE;
  const int warps = blockDim.x / KILN_WARP_SIZE;
  float* qs = qs_all + warp * a.d;
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  const T* mask = static_cast<const T*>(a.mask);
  T* out = static_cast<T*>(a.out);
  constexpr int kAcc = (kAttentionMaxHead + KILN_WARP_SIZE - 1) / KILN_WARP_SIZE;

  const int64_t tiles = (a.sq + warps - 1) / warps;
  for (int64_t task = blockIdx.x; task < a.batches * tiles; task += gridDim.x) {
    const int64_t b = task / tiles;
    const int64_t row = (task - b * tiles) * warps + warp;
    const bool active = row < a.sq;  // uniform within a wavefront
    int64_t m[4];
    strided_offsets<int64_t, 4>(a.batch, b, m);
    const T* qm = q + m[0];
    const T* km = k + m[1];
    const T* vm = v + m[2];
    const T* mm = mask ? mask + m[3] + (a.msq == 1 ? 0 : row) * a.msk : nullptr;

    __syncthreads();  // the previous task's readers of qs are done
    if (active) {
      for (int64_t e = lane; e < a.d; e += KILN_WARP_SIZE) qs[e] = to_float(qm[row * a.q_row + e]);
    }
    float top = -INFINITY, total = 0.f;
    float acc[kAcc];
    for (int t = 0; t < kAcc; ++t) acc[t] = 0.f;

    for (int64_t k0 = 0; k0 < a.sk; k0 += keys) {
      const int n = static_cast<int>(a.sk - k0 < keys ? a.sk - k0 : keys);
      __syncthreads();  // every wavefront is done with the previous tile
      for (int64_t i = threadIdx.x; i < n * a.d; i += blockDim.x) {
        const int64_t j = i / a.d, e = i - j * a.d;
        ks[j * (a.d + 1) + e] = to_float(km[(k0 + j) * a.k_row + e]);
      }
      for (int64_t i = threadIdx.x; i < n * a.dv; i += blockDim.x) {
        const int64_t j = i / a.dv, e = i - j * a.dv;
        vs[i] = to_float(vm[(k0 + j) * a.v_row + e]);
      }
      __syncthreads();
      if (!active) continue;
      float s = -INFINITY;
      if (lane < n) {
        const float* kr = ks + lane * (a.d + 1);
        float dot = 0.f;
        for (int64_t e = 0; e < a.d; ++e) dot += qs[e] * kr[e];
        s = dot * a.scale;
        if (mm) s += to_float(mm[a.msk == 1 ? 0 : k0 + lane]);
      }
      // A fully masked prefix (-inf so far) contributes nothing and must not turn the state
      // into NaN; a row masked everywhere ends as 0 / 0 = NaN, as in the reference.
      const float new_top = fmaxf(top, warp_all_reduce(s, MaxOp{}));
      const bool none = new_top == -INFINITY;
      const float p = none ? 0.f : expf(s - new_top);
      const float scale_old = none ? 1.f : expf(top - new_top);
      total = total * scale_old + warp_all_reduce(p, SumOp{});
      for (int t = 0; t < kAcc; ++t) acc[t] *= scale_old;
      for (int j = 0; j < n; ++j) {
        const float pj = __shfl(p, j);
        const float* vr = vs + j * a.dv;
        for (int t = 0; t < kAcc; ++t) {
          const int64_t e = lane + t * KILN_WARP_SIZE;
          if (e < a.dv) acc[t] += pj * vr[e];
        }
      }
      top = new_top;
    }
    if (active) {
      // A row's probabilities are all finite (total > 0) or all NaN (0 / 0, or a NaN score
      // in the sum): zero_nan_probs makes the NaN ones 0, so that row sums to 0.
      const bool zero = a.zero_nan_probs && !(total > 0.f);
      T* om = out + (b / a.out_heads) * a.sq * a.out_heads * a.dv + (b % a.out_heads) * a.dv +
              row * a.o_row;
      for (int t = 0; t < kAcc; ++t) {
        const int64_t e = lane + t * KILN_WARP_SIZE;
        if (e < a.dv) om[e] = from_float<T>(zero ? 0.f : acc[t] / total);
      }
    }
  }
}

}  // namespace

hipError_t launch_attention(FloatType type, const AttentionArgs& args, hipStream_t stream) {
  if (args.batches <= 0 || args.sq <= 0 || args.dv <= 0) return hipSuccess;
  if (args.d > kAttentionMaxHead || args.dv > kAttentionMaxHead) return hipErrorInvalidValue;
  if (type == FloatType::F16 && args.matrix_tiles && attention_tiles_fit(args))
    return launch_attention_tiles(args, stream);
  const int keys = tile_keys(args.d, args.dv);
  const size_t bytes = shared_bytes(keys, args.d, args.dv);
  // Blocks for the wave64 case (4 queries a block); a wave32 device takes 8 per block and
  // walks the rest of the grid-stride loop.
  const int64_t tasks = args.batches * ((args.sq + 3) / 4);
  const dim3 grid(static_cast<unsigned>(tasks < 65535 ? tasks : 65535));
  return dispatch_float(type, [&]<typename T>() {
    auto* kernel = &attention_kernel<T>;
    hipLaunchKernelGGL(kernel, grid, dim3(kBlock), bytes, stream, args, keys);
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
