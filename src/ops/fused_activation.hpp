#pragma once
// The activation a fused node (ai.kiln FusedConv / FusedGemm / FusedMatMul) applies to its result.
// One definition shared by the fusion passes, the reference kernels of the fused ops and every
// fast backend, so that all of them agree on names, parameters and numerics.
//
// On a node: attribute `activation` (string, one of the names below; absent = None) and
// `activation_params` (floats): Clip {min, max}, LeakyRelu {alpha}, HardSigmoid {alpha, beta};
// the others take none.
#include <cmath>
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

// Domain of Kiln's own (fused) ops.
inline constexpr const char* kKilnDomain = "ai.kiln";

enum class Activation {
  None,
  Relu,
  Clip,
  Sigmoid,
  Silu,
  HardSwish,
  HardSigmoid,
  LeakyRelu,
  Tanh,
  Gelu,
  GeluTanh
};

struct FusedActivation {
  Activation kind = Activation::None;
  float alpha = 0, beta = 0;  // Clip: min, max; LeakyRelu: alpha; HardSigmoid: alpha, beta

  // Reads `activation` / `activation_params`; an unknown name or a wrong parameter count throws
  // InvalidArgument naming the node.
  static FusedActivation from_node(const AttrReader& attrs);
  // Writes the attributes back (for the fusion passes).
  void set_on(ir::Node& node) const;
  static const char* name(Activation a);

  // The reference numerics, in double like the reference kernels of the unfused ops.
  double apply(double x) const {
    switch (kind) {
      case Activation::None:
        return x;
      case Activation::Relu:
        return x < 0 ? 0 : x;  // NaN stays NaN, as in Relu
      case Activation::Clip:
        return x < alpha ? alpha : (x > beta ? beta : x);
      case Activation::Sigmoid:
        return 1 / (1 + std::exp(-x));
      case Activation::Silu:
        return x / (1 + std::exp(-x));
      case Activation::HardSwish:
        return x * std::fmax(0.0, std::fmin(1.0, x / 6 + 0.5));
      case Activation::HardSigmoid:
        return std::fmax(0.0, std::fmin(1.0, alpha * x + beta));
      case Activation::LeakyRelu:
        return x >= 0 ? x : alpha * x;
      case Activation::Tanh:
        return std::tanh(x);
      case Activation::Gelu:
        return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
      case Activation::GeluTanh: {
        constexpr double k = 0.7978845608028654;  // sqrt(2 / pi)
        return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
      }
    }
    return x;
  }
};

}  // namespace kiln::ops
