#pragma once
// FLOP formulas that ops name in their traits (OpTraits::flops): a multiply-add is 2 FLOPs.
// Conv / ConvTranspose / Gemm / MatMul (and Kiln's fused forms, whose bias and activation add one
// operation per output element each) exactly; pooling by window, reductions by input element,
// data movement 0. Ops without a formula count one operation per output element.
#include "ops/op_traits.hpp"

namespace kiln::ops {

std::optional<double> flops_zero(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_per_output(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_per_input(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_pool_window(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_conv(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_conv_transpose(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_gemm(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_matmul(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_fused_conv(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_fused_gemm(const ir::Node& n, const ValueDims& dims);
std::optional<double> flops_fused_matmul(const ir::Node& n, const ValueDims& dims);

}  // namespace kiln::ops
