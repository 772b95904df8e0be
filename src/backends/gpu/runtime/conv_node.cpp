#include "backends/gpu/runtime/conv_node.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backends/gpu/runtime/gemm_node.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"

namespace kiln::backends::gpu {

std::string read_conv_node(const ir::Node& node, ConvNode& out) {
  if (node.domain() == "ai.kiln") {
    std::string why = read_fused_activation(node, out.activation, out.act_alpha, out.act_beta);
    if (!why.empty()) return why;
  }
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.inputs().size() > 1 ? node.input(1) : nullptr;
  if (!x || !w || !node.output(0)) return "missing operands";
  const TypeInfo& tx = x->type();
  if (!tx.is_tensor() || !float_type(tx.dtype)) {
    return fmt::format("the convolution takes float32, float16 or bfloat16, not {}",
                       tx.to_string());
  }
  out.dtype = tx.dtype;
  if (!tx.shape || tx.shape->rank() != 4) return "only 2-D (4-D input) convolutions";
  const Dim& c = tx.shape->dims()[1];
  if (!c.is_static()) return "the input's channel count is not static";
  out.channels = c.value();
  out.groups = int_attr(node, "group", 1);
  if (out.groups < 1 || out.channels % out.groups != 0) {
    return fmt::format("group {} does not divide {} input channels", out.groups, out.channels);
  }
  if (!w->is_constant() || w->constant().dtype() != tx.dtype) {
    return "the convolution needs constant weights of the input's type";
  }
  const std::vector<int64_t>& wd = w->constant().dims();
  if (wd.size() != 4 || wd[1] != out.channels / out.groups || wd[0] < 1 ||
      wd[0] % out.groups != 0) {
    return fmt::format("weights {} do not fit {} input channels in {} groups", dims_to_string(wd),
                       out.channels, out.groups);
  }
  out.filters = wd[0];
  out.kh = wd[2];
  out.kw = wd[3];
  const std::vector<int64_t> kernel_shape = ints_attr(node, "kernel_shape");
  if (!kernel_shape.empty() && kernel_shape != std::vector<int64_t>{out.kh, out.kw}) {
    return "kernel_shape does not match the weights";
  }
  const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (b && (!b->is_constant() || b->constant().dtype() != tx.dtype ||
            b->constant().dims() != std::vector<int64_t>{out.filters})) {
    return "the convolution needs a constant bias of one value per filter";
  }
  out.bias = b != nullptr;
  if (std::string why = read_fused_residual(node, tx.dtype, out.residual); !why.empty()) {
    return why;
  }
  const std::vector<int64_t> strides = ints_attr(node, "strides", {1, 1});
  const std::vector<int64_t> dilations = ints_attr(node, "dilations", {1, 1});
  if (strides.size() != 2 || dilations.size() != 2) {
    return "strides or dilations do not match a 2-D convolution";
  }
  for (int64_t v : {strides[0], strides[1], dilations[0], dilations[1]}) {
    if (v < 1 || v > (1 << 16)) return "strides and dilations must be positive";
  }
  out.stride_h = static_cast<int>(strides[0]);
  out.stride_w = static_cast<int>(strides[1]);
  out.dil_h = static_cast<int>(dilations[0]);
  out.dil_w = static_cast<int>(dilations[1]);
  const std::string auto_pad = string_attr(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    out.pads = ints_attr(node, "pads", {0, 0, 0, 0});
    if (out.pads.size() != 4) return "pads do not match a 2-D convolution";
    for (int64_t p : out.pads) {
      if (p < 0 || p > (1 << 16)) return "pads must be non-negative";
    }
  } else if (auto_pad == "SAME_UPPER") {
    out.auto_pad = ConvNode::AutoPad::SameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    out.auto_pad = ConvNode::AutoPad::SameLower;
  } else if (auto_pad != "VALID") {
    return fmt::format("unknown auto_pad '{}'", auto_pad);
  }
  return "";
}

namespace {

// Output extent along spatial dim `d` (0: H, 1: W) of an input extent `in`, and the pads there
// (pads[d] before, pads[d + 2] after), from the attributes or auto_pad SAME.
int64_t out_extent(const ConvNode& c, int64_t in, int64_t k, int stride, int dil, int d,
                   int64_t (&pads)[4]) {
  const int64_t ek = (k - 1) * dil + 1;
  if (c.auto_pad == ConvNode::AutoPad::None) {
    pads[d] = c.pads[d];
    pads[d + 2] = c.pads[d + 2];
    const int64_t span = in + pads[d] + pads[d + 2] - ek;
    return span < 0 ? 0 : span / stride + 1;
  }
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + ek - in);
  const int64_t small = total / 2;
  pads[d] = c.auto_pad == ConvNode::AutoPad::SameUpper ? small : total - small;
  pads[d + 2] = total - pads[d];
  return out;
}

}  // namespace

ConvExtent conv_extent(const ConvNode& c, int64_t h, int64_t w) {
  ConvExtent e;
  e.oh = out_extent(c, h, c.kh, c.stride_h, c.dil_h, 0, e.pads);
  e.ow = out_extent(c, w, c.kw, c.stride_w, c.dil_w, 1, e.pads);
  return e;
}

}  // namespace kiln::backends::gpu
