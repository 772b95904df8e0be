// LayerNormalization (and Kiln's SkipLayerNormalization) over contiguous rows: a wavefront per
// short row, a block per row from kShortRowMax elements. Two-pass statistics in fp32 (the mean
// first, then the mean square of the deviations: no cancellation of E[x^2] - E[x]^2). Rows of up
// to kStagedPerThread elements a thread are read once into registers (the skip sums computed
// once); longer rows recompute the sums in each pass rather than staging them.
#include "backends/gpu/kernels/layer_norm.hpp"
#include "backends/gpu/kernels/row_group.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

// Rows shorter than this take a wavefront each, at most 8 elements a lane.
constexpr int64_t kShortRowMax = 256;

// Register-staged rows on a block: up to this many elements a thread (4096 columns; BERT's
// 768: 3, read once instead of three times, which left its time unchanged: latency, not bytes).
constexpr int kStagedPerThread = 16;

// Element `i` (row-major over x) of a broadcast operand of n elements. A full-size operand
// (SkipLayerNorm's skip) needs no division: i < n.
__device__ inline int64_t operand_index(int64_t i, int64_t col, int64_t cols, int64_t n) {
  return n == cols ? col : (n == 0 ? 0 : (i < n ? i : i % n));
}

template <typename T>
struct Rows {
  const LayerNormArgs& a;
  // z at (row, col), rounded as the reference rounds its Add nodes.
  __device__ float z(int64_t row, int64_t col) const {
    const int64_t i = row * a.cols + col;
    float v = to_float(static_cast<const T*>(a.x)[i]);
    if (a.skip) {
      v = round_to<T>(
          v + to_float(static_cast<const T*>(a.skip)[operand_index(i, col, a.cols, a.skip_n)]));
    }
    if (a.bias) {
      v = round_to<T>(
          v + to_float(static_cast<const T*>(a.bias)[operand_index(i, col, a.cols, a.bias_n)]));
    }
    return v;
  }
};

// The outputs of a row are written only after both statistics of that row are reduced, and a
// row's elements are read and written by the same thread, so y (or sum) may be x.
// Staged > 0: each thread keeps its (at most Staged) elements of the row in registers, so x, skip
// and bias are read once; Staged == 0 recomputes them in each of the three passes.
template <typename T, bool BlockPerRow, int Staged>
__global__ void layer_norm_rows(LayerNormArgs a) {
  __shared__ float scratch[kReduceScratch];
  const RowGroup<BlockPerRow> g;
  const Rows<T> r{a};
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  const float count = static_cast<float>(a.cols);
  for (int64_t row = g.first_row; row < a.rows; row += g.row_stride) {
    float staged[Staged > 0 ? Staged : 1];
    float s = 0.f;
    if constexpr (Staged > 0) {
#pragma unroll
      for (int k = 0; k < Staged; ++k) {
        const int64_t j = g.lane + static_cast<int64_t>(k) * g.lanes;
        staged[k] = j < a.cols ? r.z(row, j) : 0.f;
        s += staged[k];
      }
    } else {
      for (int64_t j = g.lane; j < a.cols; j += g.lanes) s += r.z(row, j);
    }
    const float mean = g.reduce(s, SumOp{}, scratch) / count;
    float sq = 0.f;
    if constexpr (Staged > 0) {
#pragma unroll
      for (int k = 0; k < Staged; ++k) {
        const int64_t j = g.lane + static_cast<int64_t>(k) * g.lanes;
        const float d = staged[k] - mean;
        if (j < a.cols) sq += d * d;
      }
    } else {
      for (int64_t j = g.lane; j < a.cols; j += g.lanes) {
        const float d = r.z(row, j) - mean;
        sq += d * d;
      }
    }
    const float var = g.reduce(sq, SumOp{}, scratch) / count;
    const float inv = 1.f / sqrtf(var + a.epsilon);
    if (g.lane == 0) {
      if (a.mean) a.mean[row] = mean;
      if (a.inv_std) a.inv_std[row] = inv;
    }
    auto write = [&](int64_t j, float v) {
      const int64_t i = row * a.cols + j;
      float out = (v - mean) * inv;
      if (gamma) out *= to_float(gamma[operand_index(i, j, a.cols, a.gamma_n)]);
      if (beta) out += to_float(beta[operand_index(i, j, a.cols, a.beta_n)]);
      if (a.sum) static_cast<T*>(a.sum)[i] = from_float<T>(v);
      static_cast<T*>(a.y)[i] = from_float<T>(out);
    };
    if constexpr (Staged > 0) {
#pragma unroll
      for (int k = 0; k < Staged; ++k) {
        const int64_t j = g.lane + static_cast<int64_t>(k) * g.lanes;
        if (j < a.cols) write(j, staged[k]);
      }
    } else {
      for (int64_t j = g.lane; j < a.cols; j += g.lanes) write(j, r.z(row, j));
    }
  }
}

template <typename T, bool BlockPerRow, int Staged>
void launch_rows(const LayerNormArgs& args, hipStream_t stream) {
  auto* kernel = &layer_norm_rows<T, BlockPerRow, Staged>;
  hipLaunchKernelGGL(kernel, row_grid(args.rows, BlockPerRow), dim3(kBlock), 0, stream, args);
}

}  // namespace

hipError_t launch_layer_norm(FloatType type, const LayerNormArgs& args, hipStream_t stream) {
  if (args.rows <= 0 || args.cols <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() {
    // A block per row from kShortRowMax columns: a wavefront per row with BERT's 768 staged
    // (24 a lane) took 73 us at 4096 rows on the H200 (ncu), a block per row 51 us; unstaged,
    // a wavefront walks its row three times, one element a lane a step.
    if (args.cols < kShortRowMax) {
      launch_rows<T, false, kShortRowMax / 32>(args, stream);
    } else if (args.cols <= 4 * kBlock) {
      launch_rows<T, true, 4>(args, stream);
    } else if (args.cols <= kStagedPerThread * kBlock) {
      launch_rows<T, true, kStagedPerThread>(args, stream);
    } else {
      launch_rows<T, true, 0>(args, stream);
    }
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
