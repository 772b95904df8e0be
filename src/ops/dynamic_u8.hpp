#pragma once
// Run-time uint8 quantization of an activation block, as onnxruntime's dynamic kernels do it
// (DynamicQuantizeLinear, DynamicQuantizeLSTM): the block's range widened to hold 0, scale
// (max - min) / 255 in float (1 when the range is empty), the zero point -min / scale clamped to
// [0, 255] and rounded half to even, each value x / scale rounded half to even plus the zero
// point, clamped. Kept in one place so that a file runs alike in Kiln and onnxruntime.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace kiln::ops {

struct DynamicU8 {
  float scale = 1.0f;
  int32_t zero_point = 0;

  static DynamicU8 of(std::span<const float> values) {
    float lo = 0.0f, hi = 0.0f;
    for (float v : values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    DynamicU8 q;
    q.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    q.zero_point = static_cast<int32_t>(std::nearbyint(std::clamp(-lo / q.scale, 0.0f, 255.0f)));
    return q;
  }

  uint8_t code(float v) const {
    const float q = std::nearbyint(v / scale) + static_cast<float>(zero_point);
    return static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
  }
};

}  // namespace kiln::ops
