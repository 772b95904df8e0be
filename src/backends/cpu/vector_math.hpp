#pragma once
// Kiln's own CPU loops, for what oneDNN does slowly on plain layouts (depthwise convolution) or
// what is simpler to write than to set up (activations on a buffer, global pooling). Built once
// per instruction set and picked at load time (GCC target_clones), so a portable build still
// runs AVX-512 code where the CPU has it.
#include <cstddef>
#include <cstdint>

#include "ops/fused_activation.hpp"

namespace kiln::backends::cpu {

struct DepthwiseArgs {
  int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
};

// One channel plane: y[oh][ow] = bias + sum over taps inside the input of x * w. `scratch`
// holds depthwise_scratch_floats(a) floats (a zero-padded copy of the plane).
void depthwise_plane(const DepthwiseArgs& a, const float* x, const float* w, float bias, float* y,
                     float* scratch);
size_t depthwise_scratch_floats(const DepthwiseArgs& a);
// Activations apply_activation computes with vector loops (the others call
// FusedActivation::apply per element).
inline bool is_piecewise_linear(ops::Activation a) {
  using ops::Activation;
  return a == Activation::None || a == Activation::Relu || a == Activation::Clip ||
         a == Activation::LeakyRelu || a == Activation::HardSigmoid || a == Activation::HardSwish;
}
// y[i] = act(x[i]) for i < n (y may be x), with the numerics of FusedActivation::apply in
// float.
void apply_activation(const ops::FusedActivation& act, const float* x, float* y, int64_t n);
inline void apply_activation(const ops::FusedActivation& act, float* p, int64_t n) {
  apply_activation(act, p, p, n);
}

enum class BinaryOp { Add, Sub, Mul, Div };
// y[i] = a[i] op b[i] (y may be a or b); with `b_scalar`, b[0] for every i.
void binary_same_shape(BinaryOp op, const float* a, const float* b, bool b_scalar, float* y,
                       int64_t n);
// Mean (or max) of each of `rows` contiguous runs of `len` floats.
void row_means(const float* x, int64_t rows, int64_t len, float* y);
void row_maxes(const float* x, int64_t rows, int64_t len, float* y);
// y[i] = x[i] * a + b for i < n (y may be x).
void affine(const float* x, float a, float b, int64_t n, float* y);
// One channel block of a channel-blocked plane: dst[r][l] = src[r][l] * a[l] + b[l] (dst may be
// src); a and b hold `block` values (0 for padding lanes keeps them 0).
void blocked_channel_affine(const float* src, const float* a, const float* b, int64_t rows,
                            int block, float* dst);
// One channel block of a channel-blocked plane with its per-channel operand: dst[r][l] =
// src[r][l] op v[l] (v[l] op src[r][l] when `swapped`) for r < rows, l < block (dst may be src);
// lanes from `lanes` on (the channel padding of the last block) are set to 0.
void blocked_channel_binary(BinaryOp op, const float* src, const float* v, bool swapped,
                            int64_t rows, int block, int lanes, float* dst);
// Sum (or max) of each of `block` lanes over `rows` rows of `block` floats: one channel block of
// a channel-blocked plane (see DeviceTensor::block). out[l] for l < block.
void blocked_lane_reduce(const float* x, int64_t rows, int block, bool max, float* out);

}  // namespace kiln::backends::cpu
