// Depthwise convolution over channels-last tensors. The work is memory-bound (nine multiply-adds
// per output for a 3x3 filter), so the kernels are shaped around loads:
//  - a thread owns V consecutive channels (one 8- or 16-byte load per pixel: adjacent threads
//    read adjacent vectors of one pixel, so a wavefront's loads are contiguous);
//  - the tiled kernel (3x3 and 5x5 filters, W stride 1 or 2, W dilation 1) computes P output
//    pixels along W per thread, so each input column of a filter row is loaded once and used
//    by every output that covers it ((P - 1) SW + KW loads per row instead of P KW), and several
//    output rows along H, so the thread's weights (float32, in registers for 3x3) are read once
//    for all of them;
//  - everything else (other filters, dilated or larger W strides, channel counts that are no
//    whole vector) takes the generic kernel: one output pixel per thread, any geometry, vector
//    loads where the channels allow, else one channel per thread.
// Sums are float32 whatever the element type; the epilogue adds bias and residual, applies the
// activation and rounds once.
#include <climits>

#include "backends/gpu/kernels/depthwise_conv.hpp"
#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/epilogue.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

constexpr int kThreads = 256;
// Weights a thread keeps in registers for all its outputs (3x3 filters of up to eight channels):
// beyond that (5x5) they would crowd out the accumulators, so each filter row's weights are
// loaded when the row is (they stay in L1: every thread of a channel reads the same ones).
constexpr int kMaxWeightRegs = 72;

// V elements moved as one load or store (alignas makes it one 8- or 16-byte access).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int V>
__device__ inline void load_floats(const T* p, float (&out)[V]) {
  const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(p);
  KILN_UNROLL
  for (int e = 0; e < V; ++e) out[e] = to_float(v.v[e]);
}

// The general activations, called rather than inlined: a tiled thread finishes P x V outputs,
// and a copy of every point function per output would swell each kernel for activations that
// convolutions rarely carry. The clip family (None, Relu, Clip: ReLU6) stays inline.
#if defined(__CUDACC__)
#define KILN_DW_NOINLINE __noinline__
#else
#define KILN_DW_NOINLINE __attribute__((noinline))
#endif
__device__ KILN_DW_NOINLINE float activate_general(float v, GemmActivation a, float alpha,
                                                   float beta) {
  return apply_activation(a, v, alpha, beta);
}

// The epilogue's constants, decided once on the host.
struct Epilogue {
  bool clip = true;  // None (-inf, inf), Relu (0, inf), Clip (lo, hi): point::clip(v, lo, hi)
  float lo = 0.f, hi = 0.f;
  GemmActivation act = GemmActivation::None;  // otherwise
  float alpha = 0.f, beta = 0.f;
};

// How the outputs are split among threads: one item per (n, group of `rows` output rows, group
// of `pixels` output columns, vector of channels), channel vectors fastest.
struct Work {
  int cvecs = 1, ow_groups = 1, oh_groups = 1, rows = 1;
  int items = 0;  // below 2^31: the launcher splits the batch otherwise
};

// y[0..V) = round(act(acc + bias [+ z])) at `out` (an element offset of y and z).
template <typename T, int V>
__device__ inline void finish(const float (&acc)[V], const float (&bias)[V], const T* z, T* y,
                              int64_t out, const Epilogue& e) {
  float zv[V];
  if (z) {
    load_floats<T, V>(z + out, zv);
  } else {
    KILN_UNROLL
    for (int k = 0; k < V; ++k) zv[k] = 0.f;
  }
  Vec<T, V> r;
  KILN_UNROLL
  for (int k = 0; k < V; ++k) {
    // The reference's order: the convolution with its bias, then the residual.
    float v = acc[k] + bias[k];
    if (z) v += zv[k];
    v = e.clip ? point::clip(v, e.lo, e.hi) : activate_general(v, e.act, e.alpha, e.beta);
    r.v[k] = from_float<T>(v);
  }
  *reinterpret_cast<Vec<T, V>*>(y + out) = r;
}

template <int V>
__device__ inline void load_bias(const float* bias, int c0, float (&out)[V]) {
  if (bias) {
    load_floats<float, V>(bias + c0, out);
  } else {
    KILN_UNROLL
    for (int k = 0; k < V; ++k) out[k] = 0.f;
  }
}

// The input's clip from above (DepthwiseArgs::input_max): one select an element (NaN stays NaN,
// as in the reference), +inf a no-op.
template <int V>
__device__ inline void clip_above(float (&v)[V], float max) {
  KILN_UNROLL
  for (int k = 0; k < V; ++k) v[k] = v[k] > max ? max : v[k];
}

// Item -> (n, first output row, first output column, first channel).
struct Coords {
  int n, oh0, ow0, c0;
};
template <int V, int P>
__device__ inline Coords coords(int item, const Work& g) {
  Coords c;
  c.c0 = (item % g.cvecs) * V;
  item /= g.cvecs;
  c.ow0 = (item % g.ow_groups) * P;
  item /= g.ow_groups;
  c.oh0 = (item % g.oh_groups) * g.rows;
  c.n = item / g.oh_groups;
  return c;
}

// KH x KW filter, W stride SW (W dilation 1), V channels x P output columns x g.rows output
// rows per item. H stride and dilation and the pads are run-time values: they only move rows.
template <typename T, int V, int KH, int KW, int SW, int P>
__global__ void __launch_bounds__(kThreads)
    depthwise_tiled(DepthwiseArgs a, Work g, Epilogue e, const T* __restrict__ x,
                    const T* __restrict__ z, T* __restrict__ y) {
  constexpr int kCols = (P - 1) * SW + KW;  // input columns one filter row of the P outputs reads
  constexpr bool kWeightsInRegs = KH * KW * V <= kMaxWeightRegs;
  const int stride = gridDim.x * blockDim.x;
  for (int item = blockIdx.x * blockDim.x + threadIdx.x; item < g.items; item += stride) {
    const Coords at = coords<V, P>(item, g);
    // Every tap's weights when they fit in registers, else one filter row's (reloaded per row).
    float wt[kWeightsInRegs ? KH * KW : KW][V];
    if constexpr (kWeightsInRegs) {
      KILN_UNROLL
      for (int t = 0; t < KH * KW; ++t) load_floats<float, V>(a.w + t * a.c + at.c0, wt[t]);
    }
    float bias[V];
    load_bias<V>(a.bias, at.c0, bias);
    const int iw0 = at.ow0 * SW - a.pad_left;
    const int oh_end = at.oh0 + g.rows < a.oh ? at.oh0 + g.rows : a.oh;
    for (int oh = at.oh0; oh < oh_end; ++oh) {
      float acc[P][V];
      KILN_UNROLL
      for (int q = 0; q < P; ++q) {
        KILN_UNROLL
        for (int k = 0; k < V; ++k) acc[q][k] = 0.f;
      }
      KILN_UNROLL
      for (int r = 0; r < KH; ++r) {
        const int ih = oh * a.stride_h - a.pad_top + r * a.dil_h;
        if (ih < 0 || ih >= a.h) continue;
        const T* row = x + (static_cast<int64_t>(at.n) * a.h + ih) * a.w_in * a.c + at.c0;
        if constexpr (!kWeightsInRegs) {
          KILN_UNROLL
          for (int s = 0; s < KW; ++s) {
            load_floats<float, V>(a.w + (r * KW + s) * a.c + at.c0, wt[s]);
          }
        }
        KILN_UNROLL
        for (int j = 0; j < kCols; ++j) {
          const int iw = iw0 + j;
          float xv[V];
          if (iw >= 0 && iw < a.w_in) {
            load_floats<T, V>(row + iw * a.c, xv);
            clip_above<V>(xv, a.input_max);
          } else {
            KILN_UNROLL
            for (int k = 0; k < V; ++k) xv[k] = 0.f;
          }
          // Column j is tap s = j - q SW of output q.
          KILN_UNROLL
          for (int q = 0; q < P; ++q) {
            const int s = j - q * SW;
            if (s < 0 || s >= KW) continue;
            const float(&wv)[V] = wt[kWeightsInRegs ? r * KW + s : s];
            KILN_UNROLL
            for (int k = 0; k < V; ++k) acc[q][k] = fmaf(xv[k], wv[k], acc[q][k]);
          }
        }
      }
      const int64_t out_row = (static_cast<int64_t>(at.n) * a.oh + oh) * a.ow * a.c + at.c0;
      KILN_UNROLL
      for (int q = 0; q < P; ++q) {
        if (at.ow0 + q < a.ow) finish<T, V>(acc[q], bias, z, y, out_row + (at.ow0 + q) * a.c, e);
      }
    }
  }
}

// Any filter, strides, dilations: one output pixel of V channels per item.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    depthwise_generic(DepthwiseArgs a, Work g, Epilogue e, const T* __restrict__ x,
                      const T* __restrict__ z, T* __restrict__ y) {
  const int stride = gridDim.x * blockDim.x;
  for (int item = blockIdx.x * blockDim.x + threadIdx.x; item < g.items; item += stride) {
    const Coords at = coords<V, 1>(item, g);
    float acc[V];
    KILN_UNROLL
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    const int iw0 = at.ow0 * a.stride_w - a.pad_left;
    for (int r = 0; r < a.kh; ++r) {
      const int ih = at.oh0 * a.stride_h - a.pad_top + r * a.dil_h;
      if (ih < 0 || ih >= a.h) continue;
      const T* row = x + (static_cast<int64_t>(at.n) * a.h + ih) * a.w_in * a.c + at.c0;
      for (int s = 0; s < a.kw; ++s) {
        const int iw = iw0 + s * a.dil_w;
        if (iw < 0 || iw >= a.w_in) continue;
        float xv[V], wv[V];
        load_floats<T, V>(row + iw * a.c, xv);
        clip_above<V>(xv, a.input_max);
        load_floats<float, V>(a.w + (r * a.kw + s) * a.c + at.c0, wv);
        KILN_UNROLL
        for (int k = 0; k < V; ++k) acc[k] = fmaf(xv[k], wv[k], acc[k]);
      }
    }
    float bias[V];
    load_bias<V>(a.bias, at.c0, bias);
    const int64_t out =
        ((static_cast<int64_t>(at.n) * a.oh + at.oh0) * a.ow + at.ow0) * a.c + at.c0;
    finish<T, V>(acc, bias, z, y, out, e);
  }
}

int elem_bytes(FloatType t) {
  return t == FloatType::F32 ? 4 : 2;
}

bool aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Channels per thread for loads of `bytes` (1 when the channels or pointers do not allow it).
int vec_for(const DepthwiseArgs& a, int bytes) {
  const int v = bytes / elem_bytes(a.type);
  const bool ok =
      a.c % v == 0 && aligned(a.x, bytes) && aligned(a.y, bytes) && (!a.z || aligned(a.z, bytes));
  return ok ? v : 1;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Items of one batch entry for a plan.
int64_t items_per_image(const DepthwiseArgs& a, const DepthwisePlan& p) {
  return ceil_div(a.oh, p.rows) * ceil_div(a.ow, p.pixels) * (a.c / p.vec);
}

// The tiled kernels' instances: filters, W strides, channels per thread and pixels per thread.
bool tiled_shape(const DepthwiseArgs& a) {
  return ((a.kh == 3 && a.kw == 3) || (a.kh == 5 && a.kw == 5)) &&
         (a.stride_w == 1 || a.stride_w == 2) && a.dil_w == 1;
}

template <typename T, int V, int K, int SW, int P>
hipError_t launch_tiled_p(const DepthwiseArgs& a, const Work& g, const Epilogue& e, dim3 grid,
                          const T* x, const T* z, T* y, hipStream_t stream) {
  auto* kernel = &depthwise_tiled<T, V, K, K, SW, P>;
  hipLaunchKernelGGL(kernel, grid, dim3(kThreads), 0, stream, a, g, e, x, z, y);
  return hipGetLastError();
}

template <typename T, int V, int K, int SW>
hipError_t launch_tiled_sw(const DepthwiseArgs& a, const DepthwisePlan& p, const Work& g,
                           const Epilogue& e, dim3 grid, const T* x, const T* z, T* y,
                           hipStream_t stream) {
  return p.pixels == 4 ? launch_tiled_p<T, V, K, SW, 4>(a, g, e, grid, x, z, y, stream)
                       : launch_tiled_p<T, V, K, SW, 2>(a, g, e, grid, x, z, y, stream);
}

template <typename T, int V, int K>
hipError_t launch_tiled_k(const DepthwiseArgs& a, const DepthwisePlan& p, const Work& g,
                          const Epilogue& e, dim3 grid, const T* x, const T* z, T* y,
                          hipStream_t stream) {
  return a.stride_w == 1 ? launch_tiled_sw<T, V, K, 1>(a, p, g, e, grid, x, z, y, stream)
                         : launch_tiled_sw<T, V, K, 2>(a, p, g, e, grid, x, z, y, stream);
}

template <typename T, int V>
hipError_t launch_v(const DepthwiseArgs& a, const DepthwisePlan& p, const Work& g,
                    const Epilogue& e, dim3 grid, const T* x, const T* z, T* y,
                    hipStream_t stream) {
  // The tiled kernels need whole vectors: no scalar instances of them (never planned).
  if constexpr (V > 1) {
    if (p.tiled) {
      return a.kh == 3 ? launch_tiled_k<T, V, 3>(a, p, g, e, grid, x, z, y, stream)
                       : launch_tiled_k<T, V, 5>(a, p, g, e, grid, x, z, y, stream);
    }
  }
  auto* kernel = &depthwise_generic<T, V>;
  hipLaunchKernelGGL(kernel, grid, dim3(kThreads), 0, stream, a, g, e, x, z, y);
  return hipGetLastError();
}

// One launch over `images` batch entries starting at x, z, y.
template <typename T>
hipError_t launch_typed(const DepthwiseArgs& a, const DepthwisePlan& p, const Epilogue& e,
                        int images, const T* x, const T* z, T* y, hipStream_t stream) {
  Work g;
  g.cvecs = a.c / p.vec;
  g.ow_groups = static_cast<int>(ceil_div(a.ow, p.pixels));
  g.oh_groups = static_cast<int>(ceil_div(a.oh, p.rows));
  g.rows = p.rows;
  g.items = static_cast<int>(items_per_image(a, p) * images);
  // A grid-stride loop past this many blocks: enough to fill any current GPU many times over.
  const int64_t blocks = ceil_div(g.items, kThreads);
  const dim3 grid(static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)));
  constexpr int kWide = 16 / static_cast<int>(sizeof(T)), kNarrow = 8 / static_cast<int>(sizeof(T));
  if (p.vec == kWide) return launch_v<T, kWide>(a, p, g, e, grid, x, z, y, stream);
  if (p.vec == kNarrow) return launch_v<T, kNarrow>(a, p, g, e, grid, x, z, y, stream);
  return launch_v<T, 1>(a, p, g, e, grid, x, z, y, stream);
}

}  // namespace

DepthwisePlan depthwise_plan(const DepthwiseArgs& a) {
  DepthwisePlan p;
  // Four channels per thread by default (16-byte loads of float32, 8-byte of 16-bit types):
  // with eight 16-bit channels the 3x3 weights alone take 72 registers, which halves the
  // threads a multiprocessor holds for a kernel that lives on memory latency.
  const int bytes =
      a.vector_bytes == 8 || a.vector_bytes == 16 ? a.vector_bytes : 4 * elem_bytes(a.type);
  p.vec = vec_for(a, bytes);
  if (p.vec == 1 && bytes == 16) p.vec = vec_for(a, 8);
  p.tiled = p.vec > 1 && tiled_shape(a);
  if (!p.tiled) return p;
  // Enough threads to fill every multiprocessor (2048 resident threads each) before a thread
  // takes more work: more pixels along W first (input reuse), then more rows along H (weight
  // reuse).
  const int64_t want = static_cast<int64_t>(a.multiprocessors > 0 ? a.multiprocessors : 1) * 2048;
  auto items = [&](int pixels, int rows) {
    DepthwisePlan q = p;
    q.pixels = pixels;
    q.rows = rows;
    return items_per_image(a, q) * a.n;
  };
  p.pixels = a.pixels == 2 || a.pixels == 4 ? a.pixels : (items(4, 1) >= want ? 4 : 2);
  p.rows = 1;
  if (a.rows == 1 || a.rows == 2 || a.rows == 4) {
    p.rows = a.rows;
  } else {
    for (int rows : {4, 2}) {
      if (items(p.pixels, rows) >= want) {
        p.rows = rows;
        break;
      }
    }
  }
  return p;
}

hipError_t launch_depthwise_conv(const DepthwiseArgs& a, hipStream_t stream) {
  if (a.n <= 0 || a.oh <= 0 || a.ow <= 0 || a.c <= 0) return hipSuccess;
  if (a.kh <= 0 || a.kw <= 0 || a.stride_h <= 0 || a.stride_w <= 0 || a.dil_h <= 0 ||
      a.dil_w <= 0) {
    return hipErrorInvalidValue;
  }
  const DepthwisePlan p = depthwise_plan(a);
  Epilogue e;
  constexpr float kInf = __builtin_huge_valf();
  switch (a.activation) {
    case GemmActivation::None:
      e.lo = -kInf, e.hi = kInf;
      break;
    case GemmActivation::Relu:
      e.lo = 0.f, e.hi = kInf;
      break;
    case GemmActivation::Clip:
      e.lo = a.act_alpha, e.hi = a.act_beta;
      break;
    default:
      e.clip = false;
      e.act = a.activation;
      e.alpha = a.act_alpha, e.beta = a.act_beta;
  }
  // Items are int32 in the kernels: a batch too large for that runs in several launches.
  const int64_t per_image = items_per_image(a, p);
  if (per_image > INT_MAX) return hipErrorInvalidValue;
  const int images_per_launch =
      static_cast<int>(INT_MAX / per_image < a.n ? INT_MAX / per_image : a.n);
  const int64_t in_image = static_cast<int64_t>(a.h) * a.w_in * a.c;
  const int64_t out_image = static_cast<int64_t>(a.oh) * a.ow * a.c;
  return dispatch_float(a.type, [&]<typename T>() {
    const T* x = static_cast<const T*>(a.x);
    const T* z = static_cast<const T*>(a.z);
    T* y = static_cast<T*>(a.y);
    for (int n0 = 0; n0 < a.n; n0 += images_per_launch) {
      const int images = a.n - n0 < images_per_launch ? a.n - n0 : images_per_launch;
      const hipError_t st =
          launch_typed<T>(a, p, e, images, x + n0 * in_image, z ? z + n0 * out_image : nullptr,
                          y + n0 * out_image, stream);
      if (st != hipSuccess) return st;
    }
    return hipSuccess;
  });
}

}  // namespace kiln::backends::gpu::kernels
