#pragma once
// What the CPU's int8 convolution and matmul kernels read off a quantized node (ai.onnx
// QLinearConv / QLinearMatMul, ai.kiln FusedQLinearConv / FusedQLinearMatMul: the same input
// slots) and how they hand it to oneDNN: every scale and zero point a constant, the activation
// per tensor (uint8 or int8), the weight a constant 8-bit tensor, one scale or one per output
// channel. oneDNN's int8 kernels take symmetric int8 weights: zero points fold into them where
// w - zero point fits int8, else the kernel widens its product (qlinear_epilogue.hpp).
//
// oneDNN computes, per output channel c: dst = post_ops(output_scale[c] * (acc + bias[c])) +
// dst_zero_point, rounded and saturated to the output type, where acc sums (x - x_zero) * w in
// int32. So the bias goes in accumulator units (real bias / (x_scale w_scale[c])), and the
// output scale is x_scale w_scale[c] (float32 output) or that over y_scale (quantized output).
// An activation that commutes with a positive scale (Relu, LeakyRelu; Clip with its bounds
// scaled) runs in the output's units; others run in real units, then a linear post-op divides
// by y_scale.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/onednn_common.hpp"

namespace kiln::backends::cpu {

struct QLinearParams {
  DataType x_type = DataType::UInt8;
  float x_scale = 1;
  int32_t x_zero = 0;
  // ConvInteger's x_zero_point computed at run time (DynamicQuantizeLinear's): the primitive
  // takes it with each run (QLinearParams::attr, runtime_x_zero).
  bool x_zero_at_run = false;
  std::vector<float> w_scale;  // one, or one per output channel
  // The output: float32 or (a product's `output_dtype`) bfloat16 without y_scale, or uint8 /
  // int8 with its scale and zero point.
  DataType y_type = DataType::Float32;
  float y_scale = 1;
  int32_t y_zero = 0;
  std::vector<float> bias;  // in accumulator units, one per output channel; empty when none
  ops::FusedActivation act;
  // FusedQLinearConv's residual Z: the kernel puts it in dst, the sum post-op adds the scaled
  // product to it before the activation. float32 (a float32 result), or 8-bit with its scale and
  // zero point (an 8-bit result).
  bool residual = false;
  DataType residual_type = DataType::Float32;
  float residual_scale = 1;
  int32_t residual_zero = 0;

  // oneDNN's attributes for `channels` output channels; `channel_mask` is the dst dims mask of
  // the channel axis (1 << 1 for a convolution's NC..., 1 << 1 for a matmul's [rows, N]).
  // `without_activation`: the kernel applies it itself after the primitive (a float32 result).
  dnnl::primitive_attr attr(int64_t channels, int channel_mask,
                            bool without_activation = false) const;
};

// "" when the node's operands are what the kernels take (the weight in slot 3 with its output
// channels along `w_axis`, counted from its first dim), else the reason it stays on the
// reference kernel.
std::string check_qlinear(const ir::Node& node, int64_t w_axis);
// The node's parameters (check_qlinear passed). `channels`: the weight's output channels.
QLinearParams qlinear_params(const ir::Node& node, int64_t channels);

// The node's constant weight as the symmetric int8 weight the kernels take: the constant itself,
// or (uint8, or zero points other than 0) w - zero point, owned (ops/int8_weights.hpp; the
// kernel's check made sure every difference fits int8).
// With `correctable` (the kernel corrects the int32 product itself: ConvInteger, and the
// QLinear forms through finish_widened_product), a weight whose
// w - zero point leaves int8 is taken as w - c (c = 128 for uint8, 0 for int8: always int8) and
// the rest of its zero point, d[m] = zero[m] - c per output channel, is left to the kernel:
// sum (x - xz)(w - z) = sum (x - xz)(w - c) - d[m] sum (x - xz) over the window.
class Int8Weight {
 public:
  Int8Weight(const ir::Node& node, size_t slot, size_t zero_slot, int64_t axis,
             bool correctable = false);
  const Tensor& get() const { return shifted_ ? *shifted_ : *original_; }
  // d[m] per output channel along `axis`; empty when the weight needs no correction.
  const std::vector<int32_t>& correction() const { return correction_; }
  // How get()'s elements map back to the node's constant, for the engine's packed layout
  // (" plain u8 shift EVERY V,...": engine/packed_layout.hpp), so that it stores the weight
  // once; empty when get() is the constant itself.
  const std::string& plain_suffix() const { return plain_suffix_; }

 private:
  const Tensor* original_;
  std::optional<Tensor> shifted_;
  std::vector<int32_t> correction_;
  std::string plain_suffix_;
};

// An int8 kernel's weight `w` (row-major `dims`) in `layout`, for the kernel's ShapeCache: the
// engine's packed bytes mapped when they are in that layout; else packed once per layout
// (pack_once_per_layout) from `stored` decoded row-major (another CPU's layout: the plain
// constant may not be filled) or from `w`. Stored bytes pack `w` itself (zero points folded).
template <typename Cache, typename PackedOf>
PackedConstant int8_weights_in(const Cache& cache, PackedOf packed_of,
                               const std::optional<PackedWeight>& stored, const Int8Weight& w,
                               const dnnl::memory::dims& dims, const dnnl::memory::desc& layout,
                               const ir::Node& node);
// `stored` (an int8 layout) decoded row-major into a tensor of `w`'s dims, with a log line
// naming the two layouts; an empty tensor when its layout does not decode into `w`'s elements.
Tensor decode_stored_int8(const PackedWeight& stored, const Tensor& w,
                          const dnnl::memory::desc& layout, const ir::Node& node);

template <typename Cache, typename PackedOf>
PackedConstant int8_weights_in(const Cache& cache, PackedOf packed_of,
                               const std::optional<PackedWeight>& stored, const Int8Weight& weight,
                               const dnnl::memory::dims& dims, const dnnl::memory::desc& layout,
                               const ir::Node& node) {
  if (dnnl::memory mapped = stored_in_layout(stored, layout, weight.plain_suffix())) {
    return {mapped, nullptr};
  }
  const Tensor& w = weight.get();
  const Tensor decoded = stored ? decode_stored_int8(*stored, w, layout, node) : Tensor();
  const Tensor& from = decoded.numel() > 0 ? decoded : w;
  return pack_once_per_layout(cache, packed_of,
                              wrap(plain_desc(dims, dnnl::memory::data_type::s8), from.raw_data()),
                              layout);
}

// ai.onnx ConvInteger (x, w, x_zero_point, w_zero_point -> int32): "" when the CPU's int8
// convolution takes it (x 8-bit, w a constant 8-bit tensor, w's zero points constant, x's
// constant or a scalar of the run), else the reason; and its parameters (scales 1, an int32
// result).
std::string check_conv_integer(const ir::Node& node);
QLinearParams conv_integer_params(const ir::Node& node);
// x_zero_point's value in a run (slot 2), for a node with x_zero_at_run.
int32_t runtime_x_zero(std::span<const DeviceTensor> in);

// oneDNN's type for uint8 / int8 / int32 / bfloat16 / float32 tensors.
dnnl::memory::data_type qlinear_dnnl_type(DataType t);

}  // namespace kiln::backends::cpu
