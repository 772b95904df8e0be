// LSTM: the products on Kiln's GEMM (gemm.hip: matrix tiles where the device has them), the
// rest one thread per (batch entry, hidden unit): the gates' activations from the point
// functions (ops/point_ops.hpp) in float32, the cell state kept in float32 between steps and the
// hidden state in the element type (it is the next product's operand). A batch entry whose
// sequence_lens is shorter stops early: its state holds, and Y keeps zeros after its end (the
// reference's outputs).
#include <algorithm>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/kernels/lstm.hpp"
#include "ops/point_ops.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

__device__ inline float activate(const RnnAct& a, float x) {
  switch (a.kind) {
    case RnnActivation::Sigmoid:
      return point::sigmoid(x);
    case RnnActivation::Tanh:
      return point::tanh(x);
    case RnnActivation::Relu:
      return point::relu(x);
    case RnnActivation::Affine:
      return a.alpha * x + a.beta;
    case RnnActivation::LeakyRelu:
      return point::leaky_relu(x, a.alpha);
    case RnnActivation::ThresholdedRelu:
      return point::thresholded_relu(x, a.alpha);
    case RnnActivation::ScaledTanh:
      return a.alpha * point::tanh(a.beta * x);
    case RnnActivation::HardSigmoid:
      return point::hard_sigmoid(x, a.alpha, a.beta);
    case RnnActivation::Elu:
      return point::elu(x, a.alpha);
    case RnnActivation::Softsign:
      return point::softsign(x);
    case RnnActivation::Softplus:
      return point::softplus(x);
  }
  return x;
}

// One direction's view of the operands for the element-wise kernels.
struct Direction {
  int64_t seq, batch, hidden;
  int d, dirs;
  bool reverse, batch_major;
  // Index of (batch entry b, unit j) in an initial or final state tensor.
  __device__ int64_t state_index(int64_t b, int64_t j) const {
    return batch_major ? (b * dirs + d) * hidden + j : (d * batch + b) * hidden + j;
  }
};

template <typename T>
__global__ void zero_kernel(T* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = from_float<T>(0.f);
}

template <typename T>
__global__ void init_state_kernel(Direction dir, const T* h0, const T* c0, T* h, float* c) {
  const int64_t n = dir.batch * dir.hidden;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t b = i / dir.hidden, j = i % dir.hidden;
    h[i] = h0 ? h0[dir.state_index(b, j)] : from_float<T>(0.f);
    c[i] = c0 ? to_float(c0[dir.state_index(b, j)]) : 0.f;
  }
}

template <typename T>
__global__ void finish_kernel(Direction dir, const T* h, const float* c, T* y_h, T* y_c) {
  const int64_t n = dir.batch * dir.hidden;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t b = i / dir.hidden, j = i % dir.hidden;
    if (y_h) y_h[dir.state_index(b, j)] = h[i];
    if (y_c) y_c[dir.state_index(b, j)] = from_float<T>(c[i]);
  }
}

struct Gates {
  RnnAct f, g, h;
  bool has_clip, input_forget;
  float clip;
};

// Step `step` of one direction: xw holds every time step's input products ([rows of X, 4
// hidden]), hr this step's recurrent one ([batch, 4 hidden]).
template <typename T>
__global__ void gates_kernel(Direction dir, Gates gt, int64_t step, const T* xw, const T* hr,
                             const T* bias, const T* peep, const int32_t* lens, T* h, float* c,
                             T* y) {
  const int64_t hidden = dir.hidden, n = dir.batch * hidden;
  auto clipped = [&](float v) { return gt.has_clip ? fminf(fmaxf(v, -gt.clip), gt.clip) : v; };
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t b = i / hidden, j = i % hidden;
    int64_t len = lens ? lens[b] : dir.seq;
    // A length outside [0, seq] (a run-time input: no device sync to raise it) reads as 0: the
    // entry keeps its initial state and its Y stays zeros, and nothing is read past X.
    if (len < 0 || len > dir.seq) len = 0;
    if (step >= len) continue;
    const int64_t t = dir.reverse ? len - 1 - step : step;
    const int64_t row = dir.batch_major ? b * dir.seq + t : t * dir.batch + b;
    const T* xr = xw + row * 4 * hidden;
    const T* rr = hr + b * 4 * hidden;
    float pre[4];
    for (int k = 0; k < 4; ++k) {
      const int64_t at = k * hidden + j;
      pre[k] = to_float(xr[at]) + to_float(rr[at]);
      if (bias) pre[k] += to_float(bias[at]) + to_float(bias[4 * hidden + at]);
    }
    const float pi = peep ? to_float(peep[j]) : 0.f;
    const float po = peep ? to_float(peep[hidden + j]) : 0.f;
    const float pf = peep ? to_float(peep[2 * hidden + j]) : 0.f;
    const float cp = c[i];
    const float ig = activate(gt.f, clipped(pre[0] + pi * cp));
    const float fg = gt.input_forget ? 1.f - ig : activate(gt.f, clipped(pre[2] + pf * cp));
    const float cc = activate(gt.g, clipped(pre[3]));
    const float cn = fg * cp + ig * cc;
    const float og = activate(gt.f, clipped(pre[1] + po * cn));
    const T hn = from_float<T>(og * activate(gt.h, cn));
    c[i] = cn;
    h[i] = hn;
    if (y) {
      const int64_t at = dir.batch_major ? ((b * dir.seq + t) * dir.dirs + dir.d) * hidden + j
                                         : ((t * dir.dirs + dir.d) * dir.batch + b) * hidden + j;
      y[at] = hn;
    }
  }
}

constexpr size_t kScratchAlign = 256;
size_t aligned(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

struct Scratch {
  size_t xw, hr, h, c, total;
};
Scratch scratch_layout(const LstmArgs& a) {
  const size_t e = a.type == FloatType::F16 ? 2 : 4;
  const auto g = static_cast<size_t>(4 * a.hidden);
  Scratch s;
  s.xw = 0;
  s.hr = aligned(static_cast<size_t>(a.seq * a.batch) * g * e);
  s.h = s.hr + aligned(static_cast<size_t>(a.batch) * g * e);
  s.c = s.h + aligned(static_cast<size_t>(a.batch * a.hidden) * e);
  s.total = s.c + aligned(static_cast<size_t>(a.batch * a.hidden) * sizeof(float));
  return s;
}

// Y = A op(B) with B [n, k] read transposed, on the GEMM.
hipError_t product(const LstmArgs& a, const void* x, const void* w, void* y, int64_t m, int64_t n,
                   int64_t k, hipStream_t stream) {
  GemmArgs g;
  g.type = a.type;
  g.a = x;
  g.b = w;
  g.y = y;
  g.m = m, g.n = n, g.k = k;
  g.trans_b = true;
  g.matrix_tiles = a.matrix_tiles;
  g.wgmma = a.wgmma;
  g.multiprocessors = a.multiprocessors;
  return launch_gemm(g, stream);
}

template <typename T>
hipError_t run_lstm(const LstmArgs& a, hipStream_t stream) {
  const Scratch s = scratch_layout(a);
  char* base = static_cast<char*>(a.scratch);
  T* xw = reinterpret_cast<T*>(base + s.xw);
  T* hr = reinterpret_cast<T*>(base + s.hr);
  T* h = reinterpret_cast<T*>(base + s.h);
  float* c = reinterpret_cast<float*>(base + s.c);
  const int64_t g = 4 * a.hidden, units = a.batch * a.hidden;
  if (a.y && a.lens) {
    // Steps past an entry's length are never written: they read zeros.
    const int64_t n = a.seq * a.dirs * units;
    hipLaunchKernelGGL(zero_kernel<T>, grid_for(n), dim3(kBlock), 0, stream, static_cast<T*>(a.y),
                       n);
    if (hipError_t e = hipGetLastError(); e != hipSuccess) return e;
  }
  for (int d = 0; d < a.dirs; ++d) {
    const Direction dir{a.seq, a.batch, a.hidden, d, a.dirs, a.reverse || d == 1, a.batch_major};
    const T* w = static_cast<const T*>(a.w) + d * g * a.input;
    const T* r = static_cast<const T*>(a.r) + d * g * a.hidden;
    const T* bias = a.b ? static_cast<const T*>(a.b) + d * 2 * g : nullptr;
    const T* peep = a.p ? static_cast<const T*>(a.p) + d * 3 * a.hidden : nullptr;
    const Gates gates{a.act[d][0], a.act[d][1], a.act[d][2], a.has_clip, a.input_forget, a.clip};
    hipLaunchKernelGGL(init_state_kernel<T>, grid_for(units), dim3(kBlock), 0, stream, dir,
                       static_cast<const T*>(a.h0), static_cast<const T*>(a.c0), h, c);
    if (hipError_t e = hipGetLastError(); e != hipSuccess) return e;
    if (a.seq > 0) {
      if (hipError_t e = product(a, a.x, w, xw, a.seq * a.batch, g, a.input, stream);
          e != hipSuccess)
        return e;
    }
    for (int64_t step = 0; step < a.seq; ++step) {
      if (hipError_t e = product(a, h, r, hr, a.batch, g, a.hidden, stream); e != hipSuccess)
        return e;
      hipLaunchKernelGGL(gates_kernel<T>, grid_for(units), dim3(kBlock), 0, stream, dir, gates,
                         step, xw, hr, bias, peep, a.lens, h, c, static_cast<T*>(a.y));
      if (hipError_t e = hipGetLastError(); e != hipSuccess) return e;
    }
    hipLaunchKernelGGL(finish_kernel<T>, grid_for(units), dim3(kBlock), 0, stream, dir, h, c,
                       static_cast<T*>(a.y_h), static_cast<T*>(a.y_c));
    if (hipError_t e = hipGetLastError(); e != hipSuccess) return e;
  }
  return hipSuccess;
}

}  // namespace

size_t lstm_scratch_bytes(const LstmArgs& args) {
  return scratch_layout(args).total;
}

hipError_t launch_lstm(const LstmArgs& a, hipStream_t stream) {
  if (a.seq < 0 || a.batch < 0 || a.input <= 0 || a.hidden <= 0 || a.dirs < 1 || a.dirs > 2 ||
      !a.x || !a.w || !a.r || !a.scratch)
    return hipErrorInvalidValue;
  if (a.batch == 0) return hipSuccess;
  switch (a.type) {
    case FloatType::F32:
      return run_lstm<float>(a, stream);
    case FloatType::F16:
      return run_lstm<__half>(a, stream);
    default:
      return hipErrorInvalidValue;
  }
}

}  // namespace kiln::backends::gpu::kernels
