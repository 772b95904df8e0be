#include "backends/gpu/runtime/conv_node.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backends/gpu/runtime/gemm_node.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "core/half.hpp"

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
  if (std::string why = read_window_2d(node, "convolution", out); !why.empty()) return why;
  if (out.ceil_mode) return "ceil_mode is not a convolution's attribute";
  if (node.attribute("input_max")) {
    out.input_max = float_attr(node, "input_max", out.input_max);
    if (std::isnan(out.input_max)) return "FusedConv's input_max is NaN";
  }
  return "";
}

std::string refuse_input_max(const ConvNode& c, std::string_view kernel) {
  if (std::isinf(c.input_max) && c.input_max > 0) return "";
  return fmt::format(
      "{} does not clip its input (FusedConv's input_max {}): the depthwise kernel does", kernel,
      c.input_max);
}

float constant_element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::Float16:
      return half_bits_to_float(static_cast<const uint16_t*>(t.raw_data())[i]);
    case DataType::BFloat16:
      return bfloat16_bits_to_float(static_cast<const uint16_t*>(t.raw_data())[i]);
    default:
      return static_cast<const float*>(t.raw_data())[i];
  }
}

}  // namespace kiln::backends::gpu
