#include "passes/batchnorm_folding.hpp"

#include <cmath>

#include "passes/pattern_utils.hpp"

namespace kiln::passes {

std::optional<BatchNormAffine> inference_batchnorm(const ir::Node& bn, DataType type,
                                                   int64_t channels) {
  if (!is_op(&bn, "BatchNormalization") || bn.outputs().size() != 1 || bn.inputs().size() != 5 ||
      int_attr(bn, "training_mode", 0) != 0 || int_attr(bn, "spatial", 1) != 1) {
    return std::nullopt;
  }
  if (type != DataType::Float32 && type != DataType::Float64) return std::nullopt;
  for (size_t i = 1; i < 5; ++i) {
    const ir::Value* p = bn.input(i);
    if (!p || !p->is_constant() || p->constant().dtype() != type ||
        p->constant().numel() != channels) {
      return std::nullopt;
    }
  }
  const double eps = float_attr(bn, "epsilon", 1e-5f);
  const Tensor& gamma = bn.input(1)->constant();
  const Tensor& beta = bn.input(2)->constant();
  const Tensor& mean = bn.input(3)->constant();
  const Tensor& var = bn.input(4)->constant();
  BatchNormAffine a;
  a.scale.resize(static_cast<size_t>(channels));
  a.shift.resize(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const double s = element(gamma, c) / std::sqrt(element(var, c) + eps);
    a.scale[static_cast<size_t>(c)] = s;
    a.shift[static_cast<size_t>(c)] = element(beta, c) - element(mean, c) * s;
  }
  return a;
}

}  // namespace kiln::passes
