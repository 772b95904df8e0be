// Convolution of an input with few channels into a channels-last output (stem_conv.hpp). A thread
// computes kStemChannelGroup consecutive output channels of one output pixel: it reads the
// pixel's kh kw c input taps (the neighbouring threads of the same pixel read the same ones, from
// L1) and multiplies each with the group's weights, which the block keeps in shared memory as
// float32 (threads of other pixels read the same weights: broadcasts). The groups of a pixel are
// adjacent threads, so a wavefront's stores are one contiguous run of channels-last output.
#include <climits>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/kernels/epilogue.hpp"
#include "backends/gpu/kernels/stem_conv.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = kStemChannelGroup;

// The general activations out of line (the clip family stays inline): one copy, not one per
// output of the thread.
#if defined(__CUDACC__)
#define KILN_STEM_NOINLINE __noinline__
#else
#define KILN_STEM_NOINLINE __attribute__((noinline))
#endif
__device__ KILN_STEM_NOINLINE float activate_general(float v, GemmActivation a, float alpha,
                                                     float beta) {
  return apply_activation(a, v, alpha, beta);
}

template <typename T>
struct alignas(16) OutChunk {
  T v[kGroup];
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    stem_conv_kernel(StemConvArgs a, float lo, float hi, bool clip) {
  __shared__ float w_s[kStemMaxWeights];
  const int taps = a.kh * a.kw * a.c;
  for (int i = static_cast<int>(threadIdx.x); i < taps * a.f; i += kThreads) w_s[i] = a.w[i];
  __syncthreads();
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int groups = a.f / kGroup;
  const int64_t items = static_cast<int64_t>(a.n) * a.oh * a.ow * groups;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int g = static_cast<int>(item % groups);
    const int64_t pixel = item / groups;
    const int ox = static_cast<int>(pixel % a.ow);
    const int64_t rest = pixel / a.ow;
    const int oy = static_cast<int>(rest % a.oh);
    const int64_t n = rest / a.oh;
    float acc[kGroup];
    KILN_UNROLL
    for (int k = 0; k < kGroup; ++k) acc[k] = a.bias ? a.bias[g * kGroup + k] : 0.f;
    const T* xn = x + n * a.x_stride_n;
    const float* wg = w_s + g * kGroup;
    for (int r = 0; r < a.kh; ++r) {
      const int iy = oy * a.stride_h - a.pad_top + r * a.dil_h;
      const bool row_in = iy >= 0 && iy < a.h;
      for (int s = 0; s < a.kw; ++s) {
        const int ix = ox * a.stride_w - a.pad_left + s * a.dil_w;
        const bool in = row_in && ix >= 0 && ix < a.w_in;
        const T* px = xn + static_cast<int64_t>(iy) * a.x_stride_h + ix * a.x_stride_w;
        const float* wt = wg + ((r * a.kw + s) * a.c) * a.f;
        for (int c = 0; c < a.c; ++c) {
          const float v = in ? to_float(px[c * a.x_stride_c]) : 0.f;
          const float* wc = wt + c * a.f;
          KILN_UNROLL
          for (int k = 0; k < kGroup; ++k) acc[k] = fmaf(v, wc[k], acc[k]);
        }
      }
    }
    OutChunk<T> out;
    KILN_UNROLL
    for (int k = 0; k < kGroup; ++k) {
      const float v = clip ? fminf(fmaxf(acc[k], lo), hi)
                           : activate_general(acc[k], a.activation, a.act_alpha, a.act_beta);
      out.v[k] = from_float<T>(v);
    }
    *reinterpret_cast<OutChunk<T>*>(y + pixel * a.f + g * kGroup) = out;
  }
}

}  // namespace

hipError_t launch_stem_conv(const StemConvArgs& a, hipStream_t stream) {
  if (a.n <= 0 || a.oh <= 0 || a.ow <= 0) return hipSuccess;
  if (a.c <= 0 || a.f <= 0 || a.f % kGroup != 0 || a.kh <= 0 || a.kw <= 0 ||
      a.kh * a.kw * a.c > kStemMaxTaps || a.kh * a.kw * a.c * a.f > kStemMaxWeights ||
      a.stride_h <= 0 || a.stride_w <= 0 || a.dil_h <= 0 || a.dil_w <= 0 ||
      reinterpret_cast<uintptr_t>(a.y) % 16 != 0) {
    return hipErrorInvalidValue;
  }
  // The clip family inline (None, Relu, Clip: MobileNet's ReLU6), others called.
  constexpr float kInf = __builtin_huge_valf();
  bool clip = true;
  float lo = -kInf, hi = kInf;
  if (a.activation == GemmActivation::Relu) {
    lo = 0.f;
  } else if (a.activation == GemmActivation::Clip) {
    lo = a.act_alpha, hi = a.act_beta;
  } else if (a.activation != GemmActivation::None) {
    clip = false;
  }
  const int64_t items = static_cast<int64_t>(a.n) * a.oh * a.ow * (a.f / kGroup);
  const int64_t blocks_needed = (items + kThreads - 1) / kThreads;
  // A grid-stride loop: at most 2^20 blocks (each stages the weights once).
  const unsigned blocks =
      static_cast<unsigned>(blocks_needed < (1 << 20) ? blocks_needed : 1 << 20);
  return dispatch_float(a.type, [&]<typename T>() {
    hipLaunchKernelGGL(stem_conv_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream, a, lo, hi,
                       clip);
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
