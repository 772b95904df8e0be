#include "ops/op_flops.hpp"

#include <variant>

namespace kiln::ops {
namespace {

using Dims = std::vector<int64_t>;

double numel(const Dims& d) {
  double n = 1;
  for (int64_t x : d) n *= static_cast<double>(x);
  return n;
}

double product_from(const Dims& d, size_t first) {
  double n = 1;
  for (size_t i = first; i < d.size(); ++i) n *= static_cast<double>(d[i]);
  return n;
}

// The bias (input 2, when present) and a fused activation: one operation per output element each.
double epilogue(const ir::Node& n, const Dims& y, bool fused) {
  double extra = 0;
  if (fused) extra += numel(y);
  if (n.input(2)) extra += numel(y);
  return extra;
}

std::optional<double> conv(const ir::Node& n, const ValueDims& dims, bool fused) {
  std::optional<Dims> y = dims(n.output(0));
  if (!y) return std::nullopt;
  std::optional<Dims> w = dims(n.input(1));
  if (!w || w->size() < 2) return std::nullopt;
  return 2 * numel(*y) * product_from(*w, 1) + epilogue(n, *y, fused);
}

std::optional<double> gemm(const ir::Node& n, const ValueDims& dims, bool fused) {
  std::optional<Dims> y = dims(n.output(0));
  if (!y) return std::nullopt;
  std::optional<Dims> a = dims(n.input(0));
  if (!a || a->size() != 2) return std::nullopt;
  const ir::Attribute* trans = n.attribute("transA");
  const int64_t* t = trans ? std::get_if<int64_t>(&trans->storage()) : nullptr;
  const double k = static_cast<double>(t && *t != 0 ? (*a)[0] : (*a)[1]);
  return 2 * numel(*y) * k + epilogue(n, *y, fused);
}

std::optional<double> matmul(const ir::Node& n, const ValueDims& dims, bool fused) {
  std::optional<Dims> y = dims(n.output(0));
  if (!y) return std::nullopt;
  std::optional<Dims> a = dims(n.input(0));
  if (!a || a->empty()) return std::nullopt;
  return 2 * numel(*y) * static_cast<double>(a->back()) + epilogue(n, *y, fused);
}

}  // namespace

std::optional<double> flops_zero(const ir::Node&, const ValueDims&) {
  return 0.0;
}

std::optional<double> flops_per_output(const ir::Node& n, const ValueDims& dims) {
  std::optional<Dims> y = dims(n.output(0));
  if (!y) return std::nullopt;
  return numel(*y);
}

std::optional<double> flops_per_input(const ir::Node& n, const ValueDims& dims) {
  std::optional<Dims> x = dims(n.input(0));
  if (!x) return std::nullopt;
  return numel(*x);
}

std::optional<double> flops_pool_window(const ir::Node& n, const ValueDims& dims) {
  const ir::Attribute* k = n.attribute("kernel_shape");
  const auto* ks = k ? std::get_if<std::vector<int64_t>>(&k->storage()) : nullptr;
  std::optional<Dims> y = dims(n.output(0));
  if (!y || !ks) return std::nullopt;
  double window = 1;
  for (int64_t v : *ks) window *= static_cast<double>(v);
  return numel(*y) * window;
}

std::optional<double> flops_conv(const ir::Node& n, const ValueDims& dims) {
  return conv(n, dims, false);
}

std::optional<double> flops_conv_transpose(const ir::Node& n, const ValueDims& dims) {
  std::optional<Dims> y = dims(n.output(0));
  if (!y) return std::nullopt;
  std::optional<Dims> x = dims(n.input(0));
  std::optional<Dims> w = dims(n.input(1));
  if (!x || !w || w->size() < 2) return std::nullopt;
  return 2 * numel(*x) * product_from(*w, 1) + epilogue(n, *y, false);
}

std::optional<double> flops_gemm(const ir::Node& n, const ValueDims& dims) {
  return gemm(n, dims, false);
}

std::optional<double> flops_matmul(const ir::Node& n, const ValueDims& dims) {
  return matmul(n, dims, false);
}

std::optional<double> flops_fused_conv(const ir::Node& n, const ValueDims& dims) {
  return conv(n, dims, true);
}

std::optional<double> flops_fused_gemm(const ir::Node& n, const ValueDims& dims) {
  return gemm(n, dims, true);
}

std::optional<double> flops_fused_matmul(const ir::Node& n, const ValueDims& dims) {
  return matmul(n, dims, true);
}

}  // namespace kiln::ops
