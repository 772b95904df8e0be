// com.microsoft MatMulNBits (onnxruntime's contrib op, what its MatMulNBitsQuantizer and
// `kiln quantize --int4` write): Y = A dequantize(B) (+ bias), B block-quantized to 4 bits along
// K (layout: matmul_nbits_layout.hpp). A has any rank >= 1; its last dim is K and Y's is N.
// The reference dequantizes the whole weight (each value (code - zero_point) * scale in float,
// as onnxruntime's kernels round it) and accumulates the product in double, rounding once.
// ai.kiln FusedMatMulNBits: the same inputs and attributes, then the activation of
// ops/fused_activation.hpp (`activation`, `activation_params`); written by
// passes/fuse_bias_activation where an activation reads a MatMulNBits' output alone.
#include "ops/control_real_io.hpp"
#include "ops/matmul_nbits_layout.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/wrapped_kernel.hpp"

namespace kiln::ops {
namespace {

constexpr size_t kGIdx = 4, kBias = 5;

void check_slots(const AttrReader& node, size_t inputs) {
  node.check(inputs >= 3 && inputs <= 6,
             "MatMulNBits takes 3 to 6 inputs (A, B, scales, "
             "zero_points?, g_idx?, bias?), got {}",
             inputs);
}

Tensor product(KernelContext& ctx) {
  check_slots(ctx, ctx.input_count());
  const NBitsLayout l = nbits_layout(ctx);
  const Tensor& a = ctx.input(0);
  if (ctx.has_input(kGIdx)) {
    ctx.unsupported(
        "g_idx (input 4: act-order column groups) is not supported; quantize "
        "without act-order");
  }
  const Tensor* zp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  check_nbits_operands(ctx, l, ctx.input(1), ctx.input(2), zp, a.dtype());
  ctx.check(a.rank() >= 1 && a.dim(a.rank() - 1) == l.k, "A is {}; its last dim must be K={}",
            a.describe(), l.k);
  const Tensor* bias = ctx.has_input(kBias) ? &ctx.input(kBias) : nullptr;
  if (bias) {
    ctx.check(bias->dtype() == a.dtype() && bias->rank() == 1 && bias->dim(0) == l.n,
              "bias is {}; need {}[{}] (N values, the type of A)", bias->describe(),
              dtype_name(a.dtype()), l.n);
  }
  const NBitsBlockParams p = nbits_block_params(l, ctx.input(2), zp);
  const uint8_t* codes = ctx.input(1).data<uint8_t>();
  const int64_t k = l.k, n = l.n;
  std::vector<double> w(static_cast<size_t>(k * n));
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t j = 0; j < l.blocks; ++j) {
      const size_t b = static_cast<size_t>(c * l.blocks + j);
      const uint8_t* blob = codes + static_cast<int64_t>(b) * l.blob;
      for (int64_t r = 0; r < l.block_size && j * l.block_size + r < k; ++r) {
        const float v = (static_cast<float>(nbits_code(blob, r)) - p.zero_point[b]) * p.scale[b];
        w[static_cast<size_t>((j * l.block_size + r) * n + c)] = v;
      }
    }
  }
  std::vector<int64_t> out_dims = a.dims();
  out_dims.back() = n;
  const int64_t rows = a.numel() / k;
  const std::vector<double> av = ctl::to_doubles(a);
  const std::vector<double> bv = bias ? ctl::to_doubles(*bias) : std::vector<double>();
  std::vector<double> y(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    double* yr = y.data() + r * n;
    for (int64_t c = 0; c < n; ++c) yr[c] = bias ? bv[static_cast<size_t>(c)] : 0.0;
    for (int64_t q = 0; q < k; ++q) {
      const double x = av[static_cast<size_t>(r * k + q)];
      const double* wr = w.data() + q * n;
      for (int64_t c = 0; c < n; ++c) yr[c] += x * wr[c];
    }
  }
  return ctl::from_doubles(a.dtype(), out_dims, y, "MatMulNBits");
}

void matmul_nbits(KernelContext& ctx) {
  ctx.set_output(0, product(ctx));
}

void fused_matmul_nbits(KernelContext& ctx) {
  const FusedActivation act = FusedActivation::from_node(ctx);
  ctx.set_output(0, apply_activation(product(ctx), act));
}

void infer_matmul_nbits(InferContext& ctx) {
  check_slots(ctx, ctx.input_count());
  const NBitsLayout l = nbits_layout(ctx);
  if (ctx.has_input(kGIdx)) {
    ctx.unsupported(
        "g_idx (input 4: act-order column groups) is not supported; quantize "
        "without act-order");
  }
  const TypeInfo* a = ctx.input_type(0);
  if (!a || !a->is_tensor()) return;
  const Tensor* b = ctx.input_constant(1);
  const Tensor* scales = ctx.input_constant(2);
  const Tensor* zp = ctx.has_input(3) ? ctx.input_constant(3) : nullptr;
  // Weights given as initializers are checked at import, with the same messages as at run.
  if (b && scales && (zp || !ctx.has_input(3))) {
    check_nbits_operands(ctx, l, *b, *scales, zp, a->dtype);
  }
  if (!a->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(a->dtype));
    return;
  }
  std::vector<Dim> dims = a->shape->dims();
  ctx.check(!dims.empty(), "A must have rank >= 1, got a scalar");
  ctx.check(!dims.back().is_static() || dims.back().value() == l.k,
            "A is {}; its last dim must be K={}", a->shape->to_string(), l.k);
  dims.back() = Dim(l.n);
  ctx.set_output_type(0, TypeInfo::tensor(a->dtype, Shape(std::move(dims))));
}

KILN_REGISTER_OP({.domain = kMicrosoftDomain,
                  .op_type = "MatMulNBits",
                  .kernel = matmul_nbits,
                  .infer = infer_matmul_nbits});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "FusedMatMulNBits",
                  .kernel = fused_matmul_nbits,
                  .infer = infer_matmul_nbits});

}  // namespace
}  // namespace kiln::ops
