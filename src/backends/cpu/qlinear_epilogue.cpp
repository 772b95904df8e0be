#include "backends/cpu/qlinear_epilogue.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/quantize_loops.hpp"
#include "core/half_convert.hpp"

namespace kiln::backends::cpu {
namespace {

// v = act(v) over a row: the common activations as plain loops the compiler vectorizes, the
// rest through the reference's point function.
void activate(const ops::FusedActivation& act, float* v, int64_t n) {
  switch (act.kind) {
    case ops::Activation::None:
      return;
    case ops::Activation::Relu:
      for (int64_t c = 0; c < n; ++c) v[c] = v[c] > 0.f ? v[c] : 0.f;
      return;
    case ops::Activation::Clip:
      for (int64_t c = 0; c < n; ++c) v[c] = std::min(std::max(v[c], act.alpha), act.beta);
      return;
    case ops::Activation::LeakyRelu:
      for (int64_t c = 0; c < n; ++c) v[c] = v[c] < 0.f ? v[c] * act.alpha : v[c];
      return;
    default:
      for (int64_t c = 0; c < n; ++c) v[c] = static_cast<float>(act.apply(v[c]));
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
  const int64_t n = w.channels, groups = std::max<int64_t>(w.groups, 1), per_group = n / groups;
  // Per channel: the accumulator's unit in real values, and the bias in it.
  std::vector<float> unit(static_cast<size_t>(n)), bias(static_cast<size_t>(n), 0.f);
  for (int64_t c = 0; c < n; ++c) {
    unit[c] = p.x_scale * p.w_scale[p.w_scale.size() == 1 ? 0 : c];
    if (!p.bias.empty()) bias[c] = p.bias[c] * unit[c];
  }
#pragma omp parallel num_threads(w.threads) if (w.threads > 1)
  {
    // A row's real values, its offsets (bias - d[c] * sum, in real units) and its residual.
    std::vector<float> v(static_cast<size_t>(n)), offset(static_cast<size_t>(n)), z;
    if (p.residual) z.resize(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      const int32_t* acc = w.acc + r * n;
      const int32_t* sum = w.sums + r * groups;
      for (int64_t g = 0; g < groups; ++g) {
        const float s = static_cast<float>(sum[g]);
        for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c) {
          offset[c] = bias[c] - static_cast<float>(w.d[c]) * s * unit[c];
        }
      }
      for (int64_t c = 0; c < n; ++c) v[c] = static_cast<float>(acc[c]) * unit[c] + offset[c];
      if (p.residual) {
        const int64_t at = r * n;
        switch (p.residual_type) {
          case DataType::UInt8:
            dequantize_from_u8(static_cast<const uint8_t*>(w.residual) + at, z.data(), n,
                               p.residual_scale, p.residual_zero);
            break;
          case DataType::Int8:
            dequantize_from_s8(static_cast<const int8_t*>(w.residual) + at, z.data(), n,
                               p.residual_scale, p.residual_zero);
            break;
          default:
            std::copy_n(static_cast<const float*>(w.residual) + at, n, z.data());
        }
        for (int64_t c = 0; c < n; ++c) v[c] += z[c];
      }
      activate(p.act, v.data(), n);
      switch (p.y_type) {
        case DataType::UInt8:
          quantize_to_u8(v.data(), static_cast<uint8_t*>(w.y) + r * n, n, p.y_scale,
                         static_cast<float>(p.y_zero));
          break;
        case DataType::Int8:
          quantize_to_s8(v.data(), static_cast<int8_t*>(w.y) + r * n, n, p.y_scale,
                         static_cast<float>(p.y_zero));
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
