// LayerNormalization (and Kiln's SkipLayerNormalization) over contiguous rows. Rows whose
// operands are all full-size or one row long, 16-byte aligned, and at most 32 elements a lane of
// a wavefront take a wavefront each with 16-byte loads (layer_norm_vector_rows); other rows a
// wavefront per short row, a block per row from kShortRowMax elements. Two-pass statistics in
// fp32 (the mean first, then the mean square of the deviations: no cancellation of
// E[x^2] - E[x]^2). Rows of up to kStagedPerThread elements a thread are read once into registers
// (the skip sums computed once); longer rows recompute the sums in each pass rather than staging
// them.
#include <initializer_list>
#include <utility>

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

// ---- 16-byte vectors: a wavefront per row ----
// A row of up to Chunks x 16 bytes a lane (at most 32 elements): each lane loads its chunks of x
// and skip with one 16-byte load each (chunk c = lane + k * wavefront, so a wavefront's loads are
// contiguous), the statistics reduce by shuffles only, and the row is written back 16 bytes at a
// time. Taken where every operand is full-size or one row long and 16-byte aligned (BERT's
// SkipLayerNormalization: 768 columns); other shapes take layer_norm_rows.
template <typename T>
__device__ inline Vec16<T> load_chunk(const void* base, int64_t chunk) {
  return static_cast<const Vec16<T>*>(base)[chunk];
}

template <typename T, int Chunks>
__global__ void layer_norm_vector_rows(LayerNormArgs a) {
  constexpr int V = Vec16<T>::kElems;
  const RowGroup<false> g;
  const int64_t row_chunks = a.cols / V;
  const bool skip_full = a.skip_n != a.cols;  // full-size (checked on the host), else one row
  const float count = static_cast<float>(a.cols);
  for (int64_t row = g.first_row; row < a.rows; row += g.row_stride) {
    float z[Chunks][V];
    float s = 0.f;
    KILN_UNROLL
    for (int k = 0; k < Chunks; ++k) {
      const int64_t c = g.lane + static_cast<int64_t>(k) * KILN_WARP_SIZE;
      const bool in = c < row_chunks;
      Vec16<T> x{}, skip{}, bias{};
      if (in) {
        x = load_chunk<T>(a.x, row * row_chunks + c);
        if (a.skip) skip = load_chunk<T>(a.skip, skip_full ? row * row_chunks + c : c);
        if (a.bias) bias = load_chunk<T>(a.bias, c);
      }
      KILN_UNROLL
      for (int e = 0; e < V; ++e) {
        float v = to_float(x.v[e]);
        if (a.skip) v = round_to<T>(v + to_float(skip.v[e]));
        if (a.bias) v = round_to<T>(v + to_float(bias.v[e]));
        z[k][e] = in ? v : 0.f;
        s += z[k][e];
      }
    }
    const float mean = warp_all_reduce(s, SumOp{}) / count;
    float sq = 0.f;
    KILN_UNROLL
    for (int k = 0; k < Chunks; ++k) {
      const bool in = g.lane + static_cast<int64_t>(k) * KILN_WARP_SIZE < row_chunks;
      KILN_UNROLL
      for (int e = 0; e < V; ++e) {
        const float d = z[k][e] - mean;
        sq += in ? d * d : 0.f;
      }
    }
    const float var = warp_all_reduce(sq, SumOp{}) / count;
    const float inv = 1.f / sqrtf(var + a.epsilon);
    if (g.lane == 0) {
      if (a.mean) a.mean[row] = mean;
      if (a.inv_std) a.inv_std[row] = inv;
    }
    KILN_UNROLL
    for (int k = 0; k < Chunks; ++k) {
      const int64_t c = g.lane + static_cast<int64_t>(k) * KILN_WARP_SIZE;
      if (c >= row_chunks) continue;
      Vec16<T> gamma{}, beta{}, y, sum;
      if (a.gamma) gamma = load_chunk<T>(a.gamma, c);
      if (a.beta) beta = load_chunk<T>(a.beta, c);
      KILN_UNROLL
      for (int e = 0; e < V; ++e) {
        float out = (z[k][e] - mean) * inv;
        if (a.gamma) out *= to_float(gamma.v[e]);
        if (a.beta) out += to_float(beta.v[e]);
        y.v[e] = from_float<T>(out);
        sum.v[e] = from_float<T>(z[k][e]);
      }
      static_cast<Vec16<T>*>(a.y)[row * row_chunks + c] = y;
      if (a.sum) static_cast<Vec16<T>*>(a.sum)[row * row_chunks + c] = sum;
    }
  }
}

// Chunks a lane takes for the vector kernel on a wave32 device (the widest grid the host must
// assume), or 0 when the operands do not fit it.
int vector_chunks(const LayerNormArgs& a, size_t element_bytes) {
  const int64_t v = 16 / static_cast<int64_t>(element_bytes);
  if (a.cols % v != 0) return 0;
  for (const void* p : {a.x, a.skip, a.bias, a.gamma, a.beta, static_cast<const void*>(a.y),
                        static_cast<const void*>(a.sum)}) {
    if (!aligned16(p)) return 0;
  }
  if (a.skip && a.skip_n != a.cols && a.skip_n != a.rows * a.cols) return 0;
  for (auto [p, n] : {std::pair{a.bias, a.bias_n}, {a.gamma, a.gamma_n}, {a.beta, a.beta_n}}) {
    if (p && n != a.cols) return 0;
  }
  // At most 32 staged floats a lane (BERT's 768 columns: 24 in float16, 24 in float32).
  const int64_t per_lane = (a.cols / v + 31) / 32;
  for (int chunks : {1, 2, 4, 8})
    if (per_lane <= chunks) return chunks * v <= 32 ? chunks : 0;
  return 0;
}

template <typename T, bool BlockPerRow, int Staged>
void launch_rows(const LayerNormArgs& args, hipStream_t stream) {
  auto* kernel = &layer_norm_rows<T, BlockPerRow, Staged>;
  hipLaunchKernelGGL(kernel, row_grid(args.rows, BlockPerRow), dim3(kBlock), 0, stream, args);
}

template <typename T, int Chunks>
hipError_t launch_vector_rows(const LayerNormArgs& args, hipStream_t stream) {
  auto* kernel = &layer_norm_vector_rows<T, Chunks>;
  const int64_t per_wave = args.rows_per_wave > 1 ? args.rows_per_wave : 1;
  hipLaunchKernelGGL(kernel, row_grid((args.rows + per_wave - 1) / per_wave, false), dim3(kBlock),
                     0, stream, args);
  return hipGetLastError();
}

}  // namespace

hipError_t launch_layer_norm(FloatType type, const LayerNormArgs& args, hipStream_t stream) {
  if (args.rows <= 0 || args.cols <= 0) return hipSuccess;
  return dispatch_float(type, [&]<typename T>() {
    switch (vector_chunks(args, sizeof(T))) {
      case 1:
        return launch_vector_rows<T, 1>(args, stream);
      case 2:
        return launch_vector_rows<T, 2>(args, stream);
      case 4:
        return launch_vector_rows<T, 4>(args, stream);
      case 8:
        if constexpr (sizeof(T) == 4) return launch_vector_rows<T, 8>(args, stream);
        break;
      default:
        break;
    }
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
