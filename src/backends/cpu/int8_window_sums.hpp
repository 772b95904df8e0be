#pragma once
// The window sums of an int8 convolution's input, sum of (x - x_zero) over what each output
// pixel's window reads in each group's channels (padding reads x_zero: 0), which the int8
// convolution needs where a weight's zero points leave int8 (Int8Weight::correction). Two
// loops: each input pixel's channel sums, then each output pixel's taps over them. oneDNN's
// convolution with one output channel of ones, which computed this before, pads its output
// channels to a block: it had cost as much as the product itself on ResNet-50's 1x1 layers.
#include <array>
#include <cstdint>
#include <vector>

namespace kiln::backends::cpu {

// Spatial dims as 3 (D, H, W): a 1-D or 2-D convolution's missing ones are 1 (kernel 1,
// stride 1, dilation 1, pad 0).
struct WindowSumGeometry {
  int64_t batch = 1, channels = 1, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1},
      dilation{1, 1, 1}, pad{0, 0, 0};  // pad: the leading side
};

// x: channels-last [batch, in..., channels] of uint8 (`is_u8`) or int8; sums: channels-last
// [batch, out..., groups]; `pixel_sums`: the caller's scratch, resized to the input pixels
// times the groups.
void int8_window_sums(const WindowSumGeometry& g, const void* x, bool is_u8, int32_t x_zero,
                      int32_t* sums, std::vector<int32_t>& pixel_sums, int threads);

// sums[r * groups + g] = the sum of x - x_zero over the g-th of `groups` equal parts of row r
// of x ([rows, length], uint8 or int8): the row sums the int8 products' zero-point corrections
// take (groups 1), and each input pixel's channel sums of the window sums.
void int8_row_sums(const void* x, bool is_u8, int64_t rows, int64_t length, int64_t groups,
                   int32_t x_zero, int32_t* sums, int threads);

}  // namespace kiln::backends::cpu
