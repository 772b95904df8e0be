#include "backends/cpu/qlinear_params.hpp"

#include <algorithm>
#include <cmath>

#include "core/log.hpp"
#include "engine/packed_layout.hpp"
#include "ops/int8_weights.hpp"
#include "ops/qlinear_slots.hpp"

namespace kiln::backends::cpu {
namespace {

using enum ops::qlinear::Slot;

bool is_8bit(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8;
}

const Tensor* slot_constant(const ir::Node& node, size_t slot) {
  return slot < node.inputs().size() && node.input(slot) ? constant_input(node, slot) : nullptr;
}
bool has_slot(const ir::Node& node, size_t slot) {
  return slot < node.inputs().size() && node.input(slot) != nullptr;
}

// "" when slot holds a float32 constant of 1 (or `channels`) positive finite values.
std::string check_scale(const ir::Node& node, size_t slot, int64_t channels, const char* what) {
  const Tensor* s = slot_constant(node, slot);
  if (!s || s->dtype() != DataType::Float32 || s->rank() > 1) {
    return fmt::format("{} is not a constant float32 scalar or vector", what);
  }
  if (s->numel() != 1 && s->numel() != channels) {
    return fmt::format("{} has {} elements, not 1 or {}", what, s->numel(), channels);
  }
  for (int64_t i = 0; i < s->numel(); ++i) {
    const float v = s->data<float>()[i];
    if (!(v > 0) || !std::isfinite(v)) return fmt::format("{} is not positive and finite", what);
  }
  return "";
}

std::string check_zero(const ir::Node& node, size_t slot, DataType type, int64_t count,
                       const char* what) {
  if (!has_slot(node, slot)) return "";
  const Tensor* z = slot_constant(node, slot);
  if (!z || z->dtype() != type || z->rank() > 1 || z->numel() != count) {
    return fmt::format("{} is not a constant {} of {} element(s)", what, dtype_name(type), count);
  }
  return "";
}

// The type the node's output has: y_zero_point's, else uint8 (ai.kiln; ai.onnx: x's) with a
// y_scale, else float32 or the float type `output_dtype` names (ops/qlinear_fused.cpp).
DataType output_type(const ir::Node& node, DataType x_type) {
  if (has_slot(node, kYZero)) return node.input(kYZero)->type().dtype;
  if (!has_slot(node, kYScale)) {
    const auto t = static_cast<DataType>(ops::AttrReader(node).attr_int("output_dtype", 0));
    return t == DataType::Undefined ? DataType::Float32 : t;
  }
  return node.domain() == ops::kKilnDomain ? DataType::UInt8 : x_type;
}

// " plain u8|s8 shift EVERY V[,V...]": row-major element i of the constant is packed element i
// plus V[(i / EVERY) % count]; per channel along `axis` of `w`, or one value
// (engine/packed_layout.hpp).
std::string shift_suffix(const Tensor& w, int64_t axis, const std::vector<int64_t>& values) {
  const bool uniform =
      std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values.front(); });
  int64_t every = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < w.rank(); ++d) every *= w.dim(d);
  return fmt::format(
      " plain {} shift {} {}", w.dtype() == DataType::UInt8 ? "u8" : "s8", uniform ? 1 : every,
      uniform ? fmt::format("{}", values.front()) : fmt::format("{}", fmt::join(values, ",")));
}

int32_t scalar_int(const Tensor* t) {
  if (!t) return 0;
  return t->dtype() == DataType::UInt8 ? t->data<uint8_t>()[0] : t->data<int8_t>()[0];
}

}  // namespace

Int8Weight::Int8Weight(const ir::Node& node, size_t slot, size_t zero_slot, int64_t axis,
                       bool correctable)
    : original_(slot_constant(node, slot)) {
  const Tensor* zero = slot_constant(node, zero_slot);
  if (ops::symmetric_int8(*original_, zero)) return;
  shifted_ = ops::int8_minus_zero_point(*original_, zero, axis);
  if (shifted_) {
    std::vector<int64_t> z;
    if (zero) {
      for (int64_t i = 0; i < zero->numel(); ++i) z.push_back(zero->int_at(i));
    }
    plain_suffix_ = shift_suffix(*original_, axis, z.empty() ? std::vector<int64_t>{0} : z);
    return;
  }
  KILN_CHECK(correctable, ErrorCode::Internal,
             "node {}: a weight whose zero points leave int8 reached the int8 kernel",
             node.label());
  const bool u8 = original_->dtype() == DataType::UInt8;
  Tensor c(original_->dtype(), {});
  if (u8) c.data<uint8_t>()[0] = 128;
  shifted_ = ops::int8_minus_zero_point(*original_, &c, axis);
  KILN_CHECK(shifted_.has_value(), ErrorCode::Internal, "node {}: w - {} leaves int8", node.label(),
             u8 ? 128 : 0);
  plain_suffix_ = shift_suffix(*original_, axis, {u8 ? 128 : 0});
  const int64_t channels = original_->dim(static_cast<size_t>(axis));
  for (int64_t m = 0; m < channels; ++m) {
    const int64_t z = zero ? zero->int_at(zero->numel() == 1 ? 0 : m) : 0;
    correction_.push_back(static_cast<int32_t>(z - (u8 ? 128 : 0)));
  }
}

std::string check_conv_integer(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (!x || !x->type().is_tensor() || !is_8bit(x->type().dtype) || !x->type().shape) {
    return "x is not a uint8 or int8 tensor of known rank";
  }
  const size_t rank = x->type().shape->rank();
  if (rank < 3 || rank > 5) return "not a 1-D, 2-D or 3-D convolution";
  const Tensor* w = slot_constant(node, 1);
  if (!w || !is_8bit(w->dtype()) || w->rank() != rank) {
    return "w is not a constant 8-bit tensor of x's rank";
  }
  // x_zero_point: a constant, or a scalar computed in the run (DynamicQuantizeLinear's).
  const ir::Value* xz = has_slot(node, 2) ? node.input(2) : nullptr;
  if (xz && !xz->is_constant()) {
    const TypeInfo& t = xz->type();
    if (!t.is_tensor() || t.dtype != x->type().dtype || !t.shape || t.shape->rank() > 1 ||
        (t.shape->rank() == 1 && !((*t.shape)[0].is_static() && (*t.shape)[0].value() == 1))) {
      return "x_zero_point is not a scalar of x's type";
    }
  } else if (std::string why = check_zero(node, 2, x->type().dtype, 1, "x_zero_point");
             !why.empty()) {
    return why;
  }
  const Tensor* wz = slot_constant(node, 3);
  if (has_slot(node, 3) && (!wz || wz->dtype() != w->dtype() || wz->rank() > 1 ||
                            (wz->numel() != 1 && wz->numel() != w->dim(0)))) {
    return "w_zero_point is not a constant of w's type, one or one per output channel";
  }
  // Any zero points: those that do not fold into int8 the kernel corrects (Int8Weight).
  if (node.outputs().size() != 1 || !node.output(0) ||
      node.output(0)->type().dtype != DataType::Int32) {
    return "the output is not int32";
  }
  if (ops::AttrReader(node).attr_int("group", 1) < 1) return "group < 1";
  return "";
}

QLinearParams conv_integer_params(const ir::Node& node) {
  QLinearParams p;
  p.x_type = node.input(0)->type().dtype;
  p.x_zero_at_run = has_slot(node, 2) && !node.input(2)->is_constant();
  if (!p.x_zero_at_run) p.x_zero = scalar_int(slot_constant(node, 2));
  p.w_scale = {1.f};
  p.y_type = DataType::Int32;
  return p;
}

int32_t runtime_x_zero(std::span<const DeviceTensor> in) {
  const DeviceTensor& z = in[2];
  KILN_CHECK_ARG(z.numel() == 1, "x_zero_point must be a scalar, got {}", dims_to_string(z.dims));
  return z.dtype == DataType::UInt8 ? *static_cast<const uint8_t*>(z.data)
                                    : *static_cast<const int8_t*>(z.data);
}

std::string check_qlinear(const ir::Node& node, int64_t w_axis) {
  const ir::Value* x = node.input(kX);
  if (!x || !x->type().is_tensor() || !is_8bit(x->type().dtype) || !x->type().shape) {
    return "x is not a uint8 or int8 tensor of known rank";
  }
  const Tensor* w = slot_constant(node, kW);
  if (!w || !is_8bit(w->dtype())) return "the weight is not a constant 8-bit tensor";
  if (w_axis < 0 || static_cast<size_t>(w_axis) >= w->rank()) return "the weight's rank";
  const int64_t channels = w->dim(static_cast<size_t>(w_axis));
  if (std::string why = check_scale(node, kXScale, 1, "x_scale"); !why.empty()) return why;
  if (slot_constant(node, kXScale)->numel() != 1) return "x_scale is not per tensor";
  if (std::string why = check_zero(node, kXZero, x->type().dtype, 1, "x_zero_point");
      !why.empty()) {
    return why;
  }
  if (std::string why = check_scale(node, kWScale, channels, "w_scale"); !why.empty()) return why;
  const int64_t w_params = slot_constant(node, kWScale)->numel();
  if (std::string why = check_zero(node, kWZero, w->dtype(), w_params, "w_zero_point");
      !why.empty()) {
    return why;
  }
  if (has_slot(node, kYScale)) {
    if (std::string why = check_scale(node, kYScale, 1, "y_scale"); !why.empty()) return why;
    if (slot_constant(node, kYScale)->numel() != 1) return "y_scale is not per tensor";
  } else if (has_slot(node, kYZero)) {
    return "y_zero_point without y_scale";
  }
  const DataType yt = output_type(node, x->type().dtype);
  if (yt == DataType::BFloat16) {
    // oneDNN's int8 matmul writes bfloat16 on CPUs with AVX512_BF16 (convolutions: not taken).
    if (node.op_type() != "FusedQLinearMatMul" || !cpu_has_bf16()) {
      return "a bfloat16 result on this op or CPU";
    }
  } else if (yt != DataType::Float32 &&
             (!is_8bit(yt) || !check_zero(node, kYZero, yt, 1, "y_zero_point").empty())) {
    return "y_zero_point is not a constant uint8 or int8 scalar";
  }
  if (node.outputs().size() != 1 || !node.output(0) || node.output(0)->type().dtype != yt) {
    return "the output's type";
  }
  if (has_slot(node, kBias)) {
    const Tensor* b = slot_constant(node, kBias);
    const bool float_ok = node.domain() == ops::kKilnDomain && b && b->dtype() == DataType::Float32;
    if (!b || !(float_ok || b->dtype() == DataType::Int32) || b->rank() != 1 ||
        b->numel() != channels) {
      return fmt::format("the bias is not a constant vector of {} elements", channels);
    }
  }
  if (has_slot(node, kResidual) || has_slot(node, kResidualScale) ||
      has_slot(node, kResidualZero)) {
    // Added by the sum post-op to the result, before the activation: a float32 Z to a float32
    // result, an 8-bit Z (with its scale) to an 8-bit result, whose memory it takes first.
    const ir::Value* z = node.input(kResidual);
    const ir::Value* y = node.output(0);
    if (node.domain() != ops::kKilnDomain || node.op_type() != "FusedQLinearConv") {
      return "a residual input on another op than FusedQLinearConv";
    }
    if (!z || !z->type().is_tensor() || !z->type().shape || !y->type().shape ||
        !(*z->type().shape == *y->type().shape)) {
      return "the residual is not a tensor of the result's shape";
    }
    if (has_slot(node, kResidualScale)) {
      if (!is_8bit(yt) || z->type().dtype != yt) {
        return "a quantized residual needs a result of its 8-bit type";
      }
      if (std::string why = check_scale(node, kResidualScale, 1, "z_scale"); !why.empty()) {
        return why;
      }
      if (slot_constant(node, kResidualScale)->numel() != 1) return "z_scale is not per tensor";
      if (std::string why = check_zero(node, kResidualZero, z->type().dtype, 1, "z_zero_point");
          !why.empty()) {
        return why;
      }
    } else if (has_slot(node, kResidualZero) || yt != DataType::Float32 ||
               z->type().dtype != DataType::Float32) {
      return "the residual is not a float32 tensor of the float32 result's shape";
    }
  }
  if (node.inputs().size() > kResidualZero + 1) return "more inputs than FusedQLinearConv's";
  return check_activation_post_ops(node);
}

QLinearParams qlinear_params(const ir::Node& node, int64_t channels) {
  QLinearParams p;
  p.x_type = node.input(kX)->type().dtype;
  p.x_scale = slot_constant(node, kXScale)->data<float>()[0];
  p.x_zero = scalar_int(slot_constant(node, kXZero));
  const Tensor* ws = slot_constant(node, kWScale);
  p.w_scale.assign(ws->data<float>(), ws->data<float>() + ws->numel());
  p.y_type = output_type(node, p.x_type);
  if (has_slot(node, kYScale)) {
    p.y_scale = slot_constant(node, kYScale)->data<float>()[0];
    p.y_zero = scalar_int(slot_constant(node, kYZero));
  }
  if (const Tensor* b = has_slot(node, kBias) ? slot_constant(node, kBias) : nullptr) {
    p.bias.resize(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const float unit = p.x_scale * p.w_scale[p.w_scale.size() == 1 ? 0 : c];
      p.bias[c] = b->dtype() == DataType::Int32 ? static_cast<float>(b->data<int32_t>()[c])
                                                : b->data<float>()[c] / unit;
    }
  }
  p.act = node_activation(node);
  p.residual = has_slot(node, kResidual);
  if (has_slot(node, kResidualScale)) {
    p.residual_type = node.input(kResidual)->type().dtype;
    p.residual_scale = slot_constant(node, kResidualScale)->data<float>()[0];
    p.residual_zero = scalar_int(slot_constant(node, kResidualZero));
  }
  return p;
}

dnnl::primitive_attr QLinearParams::attr(int64_t channels, int channel_mask,
                                         bool without_activation) const {
  using ops::Activation;
  const ops::FusedActivation applied = without_activation ? ops::FusedActivation{} : act;
  const bool quantized = is_8bit(y_type);
  // Activations that commute with a positive scale run after the division by y_scale.
  const bool scaled_act = applied.kind == Activation::None || applied.kind == Activation::Relu ||
                          applied.kind == Activation::LeakyRelu || applied.kind == Activation::Clip;
  const float out_div = quantized && scaled_act ? y_scale : 1.f;
  std::vector<float> scales(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    scales[c] = x_scale * w_scale[w_scale.size() == 1 ? 0 : c] / out_div;
  }
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (w_scale.size() == 1) {
    a.set_output_scales(0, {scales[0]});
  } else {
    a.set_output_scales(channel_mask, scales);
  }
  if (x_zero_at_run) {
    a.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  } else if (x_zero != 0) {
    a.set_zero_points(DNNL_ARG_SRC, 0, {x_zero});
  }
  if (quantized && y_zero != 0) a.set_zero_points(DNNL_ARG_DST, 0, {y_zero});
  dnnl::post_ops ops;
  if (residual && residual_type == DataType::Float32) {
    ops.append_sum(1.f);  // a float32 output (check_qlinear)
  } else if (residual) {
    // dst holds the 8-bit Z; the post-ops run in the output's units where out_div is y_scale.
    ops.append_sum(residual_scale / out_div, residual_zero, qlinear_dnnl_type(residual_type));
  }
  ops::FusedActivation in_units = applied;
  if (applied.kind == Activation::Clip && out_div != 1.f) {
    in_units.alpha = applied.alpha / out_div;
    in_units.beta = applied.beta / out_div;
  }
  append_activation(ops, in_units);
  if (quantized && !scaled_act) {
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f / y_scale, 0.f);
  }
  a.set_post_ops(ops);
  return a;
}

dnnl::memory::data_type qlinear_dnnl_type(DataType t) {
  switch (t) {
    case DataType::UInt8:
      return dnnl::memory::data_type::u8;
    case DataType::Int8:
      return dnnl::memory::data_type::s8;
    case DataType::BFloat16:
      return dnnl::memory::data_type::bf16;
    case DataType::Int32:
      return dnnl::memory::data_type::s32;
    default:
      return dnnl::memory::data_type::f32;
  }
}

Tensor decode_stored_int8(const PackedWeight& stored, const Tensor& w,
                          const dnnl::memory::desc& layout, const ir::Node& node) {
  log_info(
      "node {}: the engine's packed weights ({}) do not fit this CPU's kernel ({}): packing them "
      "again",
      node.label(), stored.format, layout_key(layout));
  // As any reader decodes them; oneDNN's compensations after the elements are made afresh.
  std::optional<engine::BlockedLayout> from = engine::parse_blocked_layout(stored.format);
  if (!from || from->dtype != DataType::Int8 || shape_numel(from->dims) != w.numel()) return {};
  Tensor decoded(DataType::Int8, w.dims());
  engine::unpack_blocked(*from, stored.data, decoded.raw_data(), decoded.nbytes());
  return decoded;
}

}  // namespace kiln::backends::cpu
