// ai.kiln FusedQLinearConv and FusedQLinearMatMul: a static INT8 QDQ pattern as one node
// (passes/fuse_quantized_ops writes them for the CPU's int8 kernels):
//   DequantizeLinear(x) -> Conv / MatMul (weight = DequantizeLinear(int8 constant))
//     [+ bias] [-> activation] [-> QuantizeLinear]
//   FusedQLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale?, y_zero_point?,
//                    B?, Z?, z_scale?, z_zero_point?)      Conv's attributes
//     (Z: a residual of the result's shape, added before the activation, from
//     passes/fuse_conv_residual: DequantizeLinear -> Conv -> Add(Z) [-> Relu]; float32, or
//     uint8 / int8 with z_scale (and z_zero_point) when the Add read it through a
//     DequantizeLinear, as `kiln quantize` writes a residual block's skip connection)
//   FusedQLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale?,
//                      y_zero_point?, bias?)
// The slots are those of ai.onnx QLinearConv / QLinearMatMul, so one CPU kernel runs both. What
// differs: y_scale and y_zero_point may be absent (the output is then float32: the pattern had
// no QuantizeLinear after it), B / bias is float32 in real units (the QDQ graph's float bias)
// or int32 in accumulator units (QLinearConv's: scale x_scale * w_scale), and the node takes
// `activation` / `activation_params` (ops/fused_activation.hpp), applied before quantizing.
// w_scale (and w_zero_point) is per tensor or per output channel: W's axis 0 for the
// convolution, b's last axis for the product.
//
// FusedQLinearMatMul's float result may be bfloat16 or float16 instead (`output_dtype`, the
// type's code; 0 or absent: float32): a half-precision engine's product writes its readers'
// type itself (passes/convert_to_fp16) instead of float32 and a Cast.
//
// The reference computes what the unfused QDQ graph's reference kernels compute, step by step:
// dequantize (float32 products, as DequantizeLinear), the float op's reference kernel, the bias
// and activation in double (as the fused float ops), quantize (float32 division, ties to even,
// as QuantizeLinear).
#include <algorithm>

#include "core/half_convert.hpp"
#include "ops/conv_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/qlinear_slots.hpp"
#include "ops/registry.hpp"
#include "ops/wrapped_kernel.hpp"

namespace kiln::ops {
namespace {

constexpr int kConvOpset = 11;
constexpr int kMatMulOpset = 13;

using enum qlinear::Slot;

bool is_8bit(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8;
}

std::vector<float> scale_values(const KernelContext& ctx, size_t slot, const char* what) {
  const Tensor& t = ctx.input(slot);
  ctx.check(t.dtype() == DataType::Float32, "{} must be float32, got {}", what,
            dtype_name(t.dtype()));
  ctx.check(t.rank() <= 1 && t.numel() >= 1, "{} must be a scalar or 1-D, got {}", what,
            t.describe());
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    ctx.check(p[i] > 0 && std::isfinite(p[i]), "{} must be positive and finite, got {}", what,
              p[i]);
  }
  return std::vector<float>(p, p + t.numel());
}

// Zero points of `q`'s type: as many as the scale has, or all 0 when absent.
std::vector<int64_t> zero_values(const KernelContext& ctx, size_t slot, DataType type, size_t count,
                                 const char* what) {
  if (!ctx.has_input(slot)) return std::vector<int64_t>(count, 0);
  const Tensor& z = ctx.input(slot);
  ctx.check(z.dtype() == type, "{} must be {} like its tensor, got {}", what, dtype_name(type),
            dtype_name(z.dtype()));
  ctx.check(static_cast<size_t>(z.numel()) == count, "{} must have {} element(s) like its scale",
            what, count);
  return z.to_int64_vector();
}

// float32 (q - zero) * scale, per tensor or per index along `axis`, as DequantizeLinear.
Tensor dequantize(const Tensor& q, const std::vector<float>& scale,
                  const std::vector<int64_t>& zero, int64_t axis) {
  Tensor y(DataType::Float32, q.dims());
  float* py = y.data<float>();
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < q.dims().size(); ++d) inner *= q.dim(d);
  const int64_t channels = scale.size() == 1 ? 1 : q.dim(static_cast<size_t>(axis));
  for (int64_t i = 0; i < q.numel(); ++i) {
    const size_t c = channels == 1 ? 0 : static_cast<size_t>((i / inner) % channels);
    py[i] = static_cast<float>(q.int_at(i) - zero[c]) * scale[c];
  }
  return y;
}

// The per-channel parameters of the weight along `axis`: one, or the axis' length.
void check_channels(const KernelContext& ctx, const Tensor& w, int64_t axis, size_t count) {
  ctx.check(count == 1 || (axis >= 0 && static_cast<size_t>(axis) < w.dims().size() &&
                           static_cast<int64_t>(count) == w.dim(static_cast<size_t>(axis))),
            "the weight's scale has {} elements; it must be a scalar or one per output channel "
            "of {}",
            count, w.describe());
}

struct Operands {
  Tensor x, w;  // dequantized
  std::optional<Tensor> bias;
  std::vector<float> x_scale, w_scale;
};

// Dequantized x and w, and the bias in real units. `w_axis`: the weight's output-channel axis.
Operands dequantized(const KernelContext& ctx, int64_t w_axis_from_end) {
  const Tensor& x = ctx.input(kX);
  const Tensor& w = ctx.input(kW);
  ctx.check(is_8bit(x.dtype()), "x must be uint8 or int8, got {}", dtype_name(x.dtype()));
  ctx.check(is_8bit(w.dtype()), "w must be uint8 or int8, got {}", dtype_name(w.dtype()));
  Operands o;
  o.x_scale = scale_values(ctx, kXScale, "x_scale");
  ctx.check(o.x_scale.size() == 1, "x_scale must be a scalar (per-tensor activations)");
  std::vector<int64_t> x_zero = zero_values(ctx, kXZero, x.dtype(), 1, "x_zero_point");
  o.w_scale = scale_values(ctx, kWScale, "w_scale");
  const int64_t w_axis = static_cast<int64_t>(w.rank()) - w_axis_from_end;
  check_channels(ctx, w, w_axis, o.w_scale.size());
  std::vector<int64_t> w_zero =
      zero_values(ctx, kWZero, w.dtype(), o.w_scale.size(), "w_zero_point");
  o.x = dequantize(x, o.x_scale, x_zero, 0);
  o.w = dequantize(w, o.w_scale, w_zero, w_axis);
  if (ctx.has_input(kBias)) {
    const Tensor& b = ctx.input(kBias);
    const int64_t m = w.dim(static_cast<size_t>(w_axis));
    ctx.check(b.rank() == 1 && b.dim(0) == m &&
                  (b.dtype() == DataType::Float32 || b.dtype() == DataType::Int32),
              "the bias must be a 1-D float32 or int32 tensor of {} elements, got {}", m,
              b.describe());
    if (b.dtype() == DataType::Float32) {
      o.bias = b;
    } else {
      // Accumulator units, as QLinearConv's B: scale x_scale * w_scale.
      Tensor real(DataType::Float32, {m});
      for (int64_t c = 0; c < m; ++c) {
        const float s = o.x_scale[0] * o.w_scale[o.w_scale.size() == 1 ? 0 : c];
        real.data<float>()[c] = static_cast<float>(b.int_at(c)) * s;
      }
      o.bias = std::move(real);
    }
  }
  return o;
}

// The float type `output_dtype` names for a result without y_scale (float32 when absent).
DataType float_output_type(const AttrReader& attrs) {
  const auto t = static_cast<DataType>(attrs.attr_int("output_dtype", 0));
  return t == DataType::Undefined ? DataType::Float32 : t;
}

Tensor narrowed(const Tensor& y, DataType type) {
  Tensor out(type, y.dims());
  auto* bits = static_cast<uint16_t*>(out.raw_data());
  const auto n = static_cast<size_t>(y.numel());
  if (type == DataType::BFloat16) {
    floats_to_bfloat16s(y.data<float>(), bits, n);
  } else {
    floats_to_halves(y.data<float>(), bits, n);
  }
  return out;
}

// The float result quantized as QuantizeLinear does, or itself (in output_dtype's type) when the
// node has no y_scale.
Tensor requantized(const KernelContext& ctx, const Tensor& y) {
  const DataType float_type = float_output_type(ctx);
  if (!ctx.has_input(kYScale)) {
    ctx.check(!ctx.has_input(kYZero), "y_zero_point without y_scale");
    ctx.check(float_type == DataType::Float32 || float_type == DataType::BFloat16 ||
                  float_type == DataType::Float16,
              "output_dtype must name float32, bfloat16 or float16, got {}",
              dtype_name(float_type));
    return float_type == DataType::Float32 ? y : narrowed(y, float_type);
  }
  ctx.check(float_type == DataType::Float32,
            "output_dtype names a float result's type; a quantized result takes y_zero_point's");
  const std::vector<float> ys = scale_values(ctx, kYScale, "y_scale");
  ctx.check(ys.size() == 1, "y_scale must be a scalar");
  const DataType yt = ctx.has_input(kYZero) ? ctx.input(kYZero).dtype() : DataType::UInt8;
  ctx.check(is_8bit(yt), "y_zero_point must be uint8 or int8, got {}", dtype_name(yt));
  const double zero = static_cast<double>(zero_values(ctx, kYZero, yt, 1, "y_zero_point")[0]);
  const double lo = yt == DataType::UInt8 ? 0 : -128, hi = yt == DataType::UInt8 ? 255 : 127;
  Tensor q(yt, y.dims());
  const float* py = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    // Float division, as QuantizeLinear's, so that ties land where its do.
    const double v = window::saturate_round(
        window::round_half_even(static_cast<double>(py[i] / ys[0])) + zero, lo, hi);
    if (yt == DataType::UInt8) {
      q.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    } else {
      q.data<int8_t>()[i] = static_cast<int8_t>(v);
    }
  }
  return q;
}

void fused_qlinear_conv(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  Operands o = dequantized(ctx, ctx.input(kW).rank());  // axis 0
  const RtValue x(std::move(o.x)), w(std::move(o.w));
  std::optional<RtValue> b;
  if (o.bias) b.emplace(std::move(*o.bias));
  std::vector<RtValue> out =
      run_wrapped_kernel(ctx, "Conv", kConvOpset, {&x, &w, b ? &*b : nullptr});
  Tensor y = out[0].tensor();
  ctx.check(ctx.has_input(kResidual) || !ctx.has_input(kResidualScale),
            "z_scale without a residual Z");
  if (ctx.has_input(kResidual)) {
    // In float32, as the Add it replaces (a quantized Z dequantized first, as
    // DequantizeLinear: float32 products).
    const Tensor& z = ctx.input(kResidual);
    ctx.check(z.dims() == y.dims(), "the residual must have the result's shape {}, got {}",
              dims_to_string(y.dims()), z.describe());
    Tensor sum(DataType::Float32, y.dims());
    if (ctx.has_input(kResidualScale)) {
      ctx.check(is_8bit(z.dtype()), "a residual with z_scale must be uint8 or int8, got {}",
                z.describe());
      const std::vector<float> zs = scale_values(ctx, kResidualScale, "z_scale");
      ctx.check(zs.size() == 1, "z_scale must be a scalar");
      const int64_t zero = zero_values(ctx, kResidualZero, z.dtype(), 1, "z_zero_point")[0];
      for (int64_t i = 0; i < y.numel(); ++i) {
        const float real = static_cast<float>(z.int_at(i) - zero) * zs[0];
        sum.data<float>()[i] = y.data<float>()[i] + real;
      }
    } else {
      ctx.check(z.dtype() == DataType::Float32 && !ctx.has_input(kResidualZero),
                "the residual must be float32 like the result (or 8-bit with z_scale), got {}",
                z.describe());
      for (int64_t i = 0; i < y.numel(); ++i) {
        sum.data<float>()[i] = y.data<float>()[i] + z.data<float>()[i];
      }
    }
    y = std::move(sum);
  }
  ctx.set_output(0, requantized(ctx, apply_activation(y, act)));
}

void fused_qlinear_matmul(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  ctx.check(ctx.input(kW).rank() >= 1, "b must have rank >= 1");
  ctx.check(!ctx.has_input(kResidual), "FusedQLinearMatMul takes no residual input (slot 9)");
  Operands o = dequantized(ctx, 1);  // b's last axis
  const RtValue a(std::move(o.x)), b(std::move(o.w));
  std::vector<RtValue> out = run_wrapped_kernel(ctx, "MatMul", kMatMulOpset, {&a, &b});
  const Tensor& y = out[0].tensor();
  Tensor r(DataType::Float32, y.dims());
  const int64_t n = y.rank() ? y.dim(y.rank() - 1) : 1;
  const float* py = y.data<float>();
  const float* pb = o.bias ? o.bias->data<float>() : nullptr;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double v = static_cast<double>(py[i]) + (pb ? static_cast<double>(pb[i % n]) : 0.0);
    r.data<float>()[i] = static_cast<float>(act.apply(v));
  }
  ctx.set_output(0, requantized(ctx, r));
}

// output_dtype's float type without y_scale, else y_zero_point's type (uint8 when it is absent);
// Undefined for an output_dtype that names no float type (the kernel reports it).
DataType output_type(const InferContext& ctx) {
  if (!ctx.has_input(kYScale)) {
    const DataType t = float_output_type(ctx);
    const bool known = t == DataType::Float32 || t == DataType::BFloat16 || t == DataType::Float16;
    return known ? t : DataType::Undefined;
  }
  if (!ctx.has_input(kYZero)) return DataType::UInt8;
  const TypeInfo* z = ctx.input_type(kYZero);
  return z && z->is_tensor() ? z->dtype : DataType::Undefined;
}

void infer_fused_qlinear_conv(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(kX);
  const TypeInfo* w = ctx.input_type(kW);
  const DataType yt = output_type(ctx);
  if (!x || !x->is_tensor() || yt == DataType::Undefined) return;
  Dim m;
  std::vector<int64_t> kernel;
  if (ctx.has_attr("kernel_shape")) kernel = ctx.attr_ints("kernel_shape");
  if (w && w->is_tensor() && w->shape && w->shape->rank() >= 3) {
    m = (*w->shape)[0];
    if (kernel.empty()) {
      kernel = window::static_or_unknown(*w->shape, 2);
      if (std::any_of(kernel.begin(), kernel.end(), [](int64_t k) { return k < 0; })) kernel = {};
    }
  }
  ctx.set_output_type(
      0, TypeInfo::tensor(yt, window::window_output_shape(ctx, x->shape, m, kernel, false)));
}

void infer_fused_qlinear_matmul(InferContext& ctx) {
  const TypeInfo* a = ctx.input_type(kX);
  const TypeInfo* b = ctx.input_type(kW);
  const DataType yt = output_type(ctx);
  if (!a || !a->is_tensor() || !b || !b->is_tensor() || yt == DataType::Undefined) return;
  std::optional<Shape> shape;
  // The common case only (a of rank >= 2 times a 2-D b); other shapes are left to the kernel.
  if (a->shape && b->shape && a->shape->rank() >= 2 && b->shape->rank() == 2) {
    std::vector<Dim> dims = a->shape->dims();
    dims.back() = (*b->shape)[1];
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(yt, shape));
}

// The float op's count: one multiply-add per accumulated product.
std::optional<double> flops_fused_qlinear_conv(const ir::Node& n, const ValueDims& dims) {
  const std::optional<std::vector<int64_t>> y = dims(n.output(0)), w = dims(n.input(kW));
  if (!y || !w || w->empty()) return std::nullopt;
  const double per_output = static_cast<double>(shape_numel(*w)) / std::max<int64_t>((*w)[0], 1);
  return 2.0 * static_cast<double>(shape_numel(*y)) * per_output;
}

std::optional<double> flops_fused_qlinear_matmul(const ir::Node& n, const ValueDims& dims) {
  const std::optional<std::vector<int64_t>> y = dims(n.output(0)), b = dims(n.input(kW));
  if (!y || !b || b->size() != 2) return std::nullopt;
  return 2.0 * static_cast<double>(shape_numel(*y)) * static_cast<double>((*b)[0]);
}

KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedQLinearConv",
                  .kernel = fused_qlinear_conv,
                  .infer = infer_fused_qlinear_conv,
                  .traits = {.flops = flops_fused_qlinear_conv}});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedQLinearMatMul",
                  .kernel = fused_qlinear_matmul,
                  .infer = infer_fused_qlinear_matmul,
                  // A float result may be written in bfloat16 (the CPU's int8 matmul has no
                  // float16 result).
                  .traits = {.fp16 = {.safe = true,
                                      .inputs = 0,
                                      .outputs = slots({0}),
                                      .bf16_only = true,
                                      .output_type_attribute = "output_dtype"},
                             .flops = flops_fused_qlinear_matmul}});

}  // namespace
}  // namespace kiln::ops
