#include "backends/cpu/qlinear_epilogue.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/half_convert.hpp"

namespace kiln::backends::cpu {
namespace {

float residual_at(const QLinearParams& p, const void* z, int64_t i) {
  switch (p.residual_type) {
    case DataType::UInt8:
      return (static_cast<const uint8_t*>(z)[i] - p.residual_zero) * p.residual_scale;
    case DataType::Int8:
      return (static_cast<const int8_t*>(z)[i] - p.residual_zero) * p.residual_scale;
    default:
      return static_cast<const float*>(z)[i];
  }
}

template <typename T>
void quantize_row(const float* v, int64_t n, float y_scale, int32_t y_zero, T* out) {
  constexpr float lo = std::is_same_v<T, uint8_t> ? 0.f : -128.f;
  constexpr float hi = std::is_same_v<T, uint8_t> ? 255.f : 127.f;
  for (int64_t c = 0; c < n; ++c) {
    // Round to nearest even, as oneDNN's requantization.
    const float q = std::nearbyint(v[c] / y_scale) + static_cast<float>(y_zero);
    out[c] = static_cast<T>(std::clamp(q, lo, hi));
  }
}

}  // namespace

QLinearParams widened_product_params(const QLinearParams& params) {
  QLinearParams p;
  p.x_type = params.x_type;
  p.x_zero = params.x_zero;
  p.x_zero_at_run = params.x_zero_at_run;
  p.w_scale = {1.f};
  p.y_type = DataType::Int32;
  return p;
}

void finish_widened_product(const QLinearParams& p, const WidenedProduct& w) {
  const int64_t n = w.channels, per_group = n / std::max<int64_t>(w.groups, 1);
  std::vector<float> unit(static_cast<size_t>(n)), bias(static_cast<size_t>(n), 0.f);
  for (int64_t c = 0; c < n; ++c) {
    unit[c] = p.x_scale * p.w_scale[p.w_scale.size() == 1 ? 0 : c];
    if (!p.bias.empty()) bias[c] = p.bias[c];  // accumulator units
  }
  const bool activation = p.act.kind != ops::Activation::None;
#pragma omp parallel num_threads(w.threads) if (w.threads > 1)
  {
    std::vector<float> v(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      const int32_t* acc = w.acc + r * n;
      const int32_t* sum = w.sums + r * w.groups;
      for (int64_t c = 0; c < n; ++c) {
        const int64_t exact =
            static_cast<int64_t>(acc[c]) - static_cast<int64_t>(w.d[c]) * sum[c / per_group];
        v[c] = (static_cast<float>(exact) + bias[c]) * unit[c];
      }
      if (p.residual) {
        for (int64_t c = 0; c < n; ++c) v[c] += residual_at(p, w.residual, r * n + c);
      }
      if (activation) {
        for (int64_t c = 0; c < n; ++c) v[c] = static_cast<float>(p.act.apply(v[c]));
      }
      switch (p.y_type) {
        case DataType::UInt8:
          quantize_row(v.data(), n, p.y_scale, p.y_zero, static_cast<uint8_t*>(w.y) + r * n);
          break;
        case DataType::Int8:
          quantize_row(v.data(), n, p.y_scale, p.y_zero, static_cast<int8_t*>(w.y) + r * n);
          break;
        case DataType::BFloat16:
          floats_to_bfloat16s(v.data(), static_cast<uint16_t*>(w.y) + r * n,
                              static_cast<size_t>(n));
          break;
        default:
          std::copy(v.begin(), v.end(), static_cast<float*>(w.y) + r * n);
      }
    }
  }
}

}  // namespace kiln::backends::cpu
