// LayerNormalization (and Kiln's SkipLayerNormalization) over contiguous rows: a wavefront per
// short row, a block per row from kBlockRowMin elements. Two-pass statistics in fp32 (the mean
// first, then the mean square of the deviations: no cancellation of E[x^2] - E[x]^2), recomputing
// the skip sums in each pass rather than staging the row.
#include "backends/gpu/kernels/layer_norm.hpp"
#include "backends/gpu/kernels/row_group.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

constexpr int64_t kBlockRowMin = 256;

// Element `i` (row-major over x) of a broadcast operand of n elements.
__device__ inline int64_t operand_index(int64_t i, int64_t col, int64_t cols, int64_t n) {
  return n == cols ? col : (n == 0 ? 0 : i % n);
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
template <typename T, bool BlockPerRow>
__global__ void layer_norm_rows(LayerNormArgs a) {
  __shared__ float scratch[kReduceScratch];
  const RowGroup<BlockPerRow> g;
  const Rows<T> r{a};
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  const float count = static_cast<float>(a.cols);
  for (int64_t row = g.first_row; row < a.rows; row += g.row_stride) {
    float s = 0.f;
    for (int64_t j = g.lane; j < a.cols; j += g.lanes) s += r.z(row, j);
    const float mean = g.reduce(s, SumOp{}, scratch) / count;
    float sq = 0.f;
    for (int64_t j = g.lane; j < a.cols; j += g.lanes) {
      const float d = r.z(row, j) - mean;
      sq += d * d;
    }
    const float var = g.reduce(sq, SumOp{}, scratch) / count;
    const float inv = 1.f / sqrtf(var + a.epsilon);
    if (g.lane == 0) {
      if (a.mean) a.mean[row] = mean;
      if (a.inv_std) a.inv_std[row] = inv;
    }
    for (int64_t j = g.lane; j < a.cols; j += g.lanes) {
      const int64_t i = row * a.cols + j;
      const float v = r.z(row, j);
      float out = (v - mean) * inv;
      if (gamma) out *= to_float(gamma[operand_index(i, j, a.cols, a.gamma_n)]);
      if (beta) out += to_float(beta[operand_index(i, j, a.cols, a.beta_n)]);
      if (a.sum) static_cast<T*>(a.sum)[i] = from_float<T>(v);
      static_cast<T*>(a.y)[i] = from_float<T>(out);
    }
  }
}

}  // namespace

hipError_t launch_layer_norm(FloatType type, const LayerNormArgs& args, hipStream_t stream) {
  if (args.rows <= 0 || args.cols <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() {
    // A wavefront walks its row three times, one element per lane per step, each step waiting
    // on its loads: from a few hundred columns on a block per row keeps more loads in flight
    // (BERT's 768: 24 serial steps per pass on a wavefront, 3 on a block).
    if (args.cols > kWarpRowMax || args.cols >= kBlockRowMin) {
      auto* kernel = &layer_norm_rows<T, true>;
      hipLaunchKernelGGL(kernel, row_grid(args.rows, true), dim3(kBlock), 0, stream, args);
    } else {
      auto* kernel = &layer_norm_rows<T, false>;
      hipLaunchKernelGGL(kernel, row_grid(args.rows, false), dim3(kBlock), 0, stream, args);
    }
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
