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

// KH, KW, C: the filter's extent and the input channels as constants (0: read from the
// arguments). MobileNetV2's and EfficientNet's 3x3x3 stems take the constant form, whose 27
// loads are then issued together; others the general loop. Coordinates are 32-bit within an
// image (the runtime checks that an image has fewer than 2^31 elements); blockIdx.y walks the
// images.
template <typename T, int KH, int KW, int C>
__global__ void __launch_bounds__(kThreads)
    stem_conv_kernel(StemConvArgs a, float lo, float hi, bool clip) {
  __shared__ float w_s[kStemMaxWeights];
  const int kh = KH > 0 ? KH : a.kh, kw = KW > 0 ? KW : a.kw, channels = C > 0 ? C : a.c;
  const int taps = kh * kw * channels;
  for (int i = static_cast<int>(threadIdx.x); i < taps * a.f; i += kThreads) w_s[i] = a.w[i];
  __syncthreads();
  const int groups = a.f / kGroup;
  const int per_image = a.oh * a.ow * groups;
  const int item = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (item >= per_image) return;
  const int g = item % groups;
  const int pixel = item / groups;
  const int ox = pixel % a.ow, oy = pixel / a.ow;
  const int sc = static_cast<int>(a.x_stride_c), sh = static_cast<int>(a.x_stride_h);
  const int sw = static_cast<int>(a.x_stride_w);
  const int y0 = oy * a.stride_h - a.pad_top, x0 = ox * a.stride_w - a.pad_left;
  for (int64_t n = blockIdx.y; n < a.n; n += gridDim.y) {
    const T* xn = static_cast<const T*>(a.x) + n * a.x_stride_n;
    float acc[kGroup];
    KILN_UNROLL
    for (int k = 0; k < kGroup; ++k) acc[k] = a.bias ? a.bias[g * kGroup + k] : 0.f;
    // One tap: input (r, s, c) times the group's weights of it.
    auto tap = [&](int r, int s, int c) {
      const int iy = y0 + r * a.dil_h, ix = x0 + s * a.dil_w;
      const bool in = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w_in;
      const float v = in ? to_float(xn[iy * sh + ix * sw + c * sc]) : 0.f;
      const float* wc = w_s + ((r * kw + s) * channels + c) * a.f + g * kGroup;
      KILN_UNROLL
      for (int k = 0; k < kGroup; ++k) acc[k] = fmaf(v, wc[k], acc[k]);
    };
    if constexpr (KH > 0 && KW > 0 && C > 0) {
      KILN_UNROLL
      for (int r = 0; r < KH; ++r) {
        KILN_UNROLL
        for (int s = 0; s < KW; ++s) {
          KILN_UNROLL
          for (int c = 0; c < C; ++c) tap(r, s, c);
        }
      }
    } else {
      for (int r = 0; r < kh; ++r)
        for (int s = 0; s < kw; ++s)
          for (int c = 0; c < channels; ++c) tap(r, s, c);
    }
    OutChunk<T> out;
    KILN_UNROLL
    for (int k = 0; k < kGroup; ++k) {
      const float v = clip ? fminf(fmaxf(acc[k], lo), hi)
                           : activate_general(acc[k], a.activation, a.act_alpha, a.act_beta);
      out.v[k] = from_float<T>(v);
    }
    T* yn = static_cast<T*>(a.y) + n * per_image * kGroup;
    *reinterpret_cast<OutChunk<T>*>(yn + item * kGroup) = out;
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
  const int64_t per_image = static_cast<int64_t>(a.oh) * a.ow * (a.f / kGroup);
  if (per_image * kGroup >= (int64_t{1} << 31)) return hipErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((per_image + kThreads - 1) / kThreads),
                  static_cast<unsigned>(a.n < 65535 ? a.n : 65535));
  const bool stem3 = a.kh == 3 && a.kw == 3 && a.c == 3;
  return dispatch_float(a.type, [&]<typename T>() {
    if (stem3) {
      hipLaunchKernelGGL((stem_conv_kernel<T, 3, 3, 3>), grid, dim3(kThreads), 0, stream, a, lo, hi,
                         clip);
    } else {
      hipLaunchKernelGGL((stem_conv_kernel<T, 0, 0, 0>), grid, dim3(kThreads), 0, stream, a, lo, hi,
                         clip);
    }
    return hipGetLastError();
  });
}

}  // namespace kiln::backends::gpu::kernels
