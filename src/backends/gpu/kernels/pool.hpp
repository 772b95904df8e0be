#pragma once
// Launcher of Kiln's own 2-D pooling (pool.hip): max and average over any window, stride,
// dilation and pads (asymmetric ones and ceil_mode's partial last windows included: the caller
// computes the output size and the leading pads), row-major (NCHW) or channels-last (NHWC);
// float32, float16 and bfloat16, averages summed in float32. A global pool is the window of the
// whole plane. Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// y[n, c, oh, ow] over the taps x[n, c, oh sh - pt + r dh, ow sw - pl + s dw] (r < kh, s < kw)
// that lie inside [0, h) x [0, w), as ONNX's MaxPool and AveragePool define it:
//  - max: the largest tap, compared as the reference does (a later tap replaces the best only
//    when greater, so a NaN counts only as a window's first tap); a window of padding alone
//    gives the type's lowest value (-inf for 16-bit types, -FLT_MAX for float32);
//  - average: the taps' sum over their count, or with count_include_pad over the taps inside
//    the padded input [-pt, h + pb) x [-pl, w + pr) (ceil_mode's last window may reach past
//    it); 0 for a window with nothing to count.
struct PoolArgs {
  FloatType type = FloatType::F32;
  const void* x = nullptr;
  void* y = nullptr;
  bool channels_last = false;  // NHWC storage of x and y, else NCHW
  bool max = true;
  bool count_include_pad = false;
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

hipError_t launch_pool(const PoolArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
