#include "backends/cpu/int8_window_sums.hpp"

#include <cstddef>
#include <vector>

namespace kiln::backends::cpu {
namespace {

template <typename T>
void row_sums(const T* x, int64_t rows, int64_t length, int64_t groups, int32_t x_zero,
              int32_t* sums, int threads) {
  const int64_t part = length / groups;
  const int32_t zero_total = x_zero * static_cast<int32_t>(part);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * length;
    for (int64_t grp = 0; grp < groups; ++grp) {
      int32_t total = 0;
      for (int64_t c = grp * part; c < (grp + 1) * part; ++c) total += row[c];
      sums[r * groups + grp] = total - zero_total;
    }
  }
}

}  // namespace

void int8_row_sums(const void* x, bool is_u8, int64_t rows, int64_t length, int64_t groups,
                   int32_t x_zero, int32_t* sums, int threads) {
  if (is_u8) {
    row_sums(static_cast<const uint8_t*>(x), rows, length, groups, x_zero, sums, threads);
  } else {
    row_sums(static_cast<const int8_t*>(x), rows, length, groups, x_zero, sums, threads);
  }
}

void int8_window_sums(const WindowSumGeometry& g, const void* x, bool is_u8, int32_t x_zero,
                      int32_t* sums, std::vector<int32_t>& pixel_sums, int threads) {
  const int64_t in_pixels = g.batch * g.in[0] * g.in[1] * g.in[2];
  pixel_sums.resize(static_cast<size_t>(in_pixels * g.groups));
  int8_row_sums(x, is_u8, in_pixels, g.channels, g.groups, x_zero, pixel_sums.data(), threads);
  const int32_t* p = pixel_sums.data();
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
          const int32_t* line = p + ((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] * groups;
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
