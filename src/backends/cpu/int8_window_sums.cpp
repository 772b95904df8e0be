#include "backends/cpu/int8_window_sums.hpp"

#include <cstddef>
#include <vector>

namespace kiln::backends::cpu {
namespace {

template <typename T>
void pixel_sums(const WindowSumGeometry& g, const T* x, int32_t x_zero, int32_t* p, int threads) {
  const int64_t pixels = g.batch * g.in[0] * g.in[1] * g.in[2];
  const int64_t per_group = g.channels / g.groups;
  const int32_t zero_total = x_zero * static_cast<int32_t>(per_group);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t q = 0; q < pixels; ++q) {
    const T* px = x + q * g.channels;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      int32_t total = 0;
      for (int64_t c = grp * per_group; c < (grp + 1) * per_group; ++c) total += px[c];
      p[q * g.groups + grp] = total - zero_total;
    }
  }
}

}  // namespace

void int8_window_sums(const WindowSumGeometry& g, const void* x, bool is_u8, int32_t x_zero,
                      int32_t* sums, int threads) {
  const int64_t in_pixels = g.batch * g.in[0] * g.in[1] * g.in[2];
  std::vector<int32_t> p(static_cast<size_t>(in_pixels * g.groups));
  if (is_u8) {
    pixel_sums(g, static_cast<const uint8_t*>(x), x_zero, p.data(), threads);
  } else {
    pixel_sums(g, static_cast<const int8_t*>(x), x_zero, p.data(), threads);
  }
  const int64_t rows = g.batch * g.out[0] * g.out[1];  // one (n, od, oh) a row of ow
  const int64_t groups = g.groups;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = row / (g.out[0] * g.out[1]);
    const int64_t od = row / g.out[1] % g.out[0], oh = row % g.out[1];
    int32_t* out = sums + row * g.out[2] * groups;
    for (int64_t ow = 0; ow < g.out[2]; ++ow) {
      int32_t* s = out + ow * groups;
      for (int64_t grp = 0; grp < groups; ++grp) s[grp] = 0;
      for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
        const int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
          const int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          const int32_t* line = p.data() + ((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] * groups;
          for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
            const int64_t iw = ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            for (int64_t grp = 0; grp < groups; ++grp) s[grp] += line[iw * groups + grp];
          }
        }
      }
    }
  }
}

}  // namespace kiln::backends::cpu
