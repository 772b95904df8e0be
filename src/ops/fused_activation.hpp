#pragma once
// The activation a fused node (ai.kiln FusedConv / FusedGemm / FusedMatMul) applies to its result.
// One definition shared by the fusion passes, the reference kernels of the fused ops and every
// fast backend, so that all of them agree on names, parameters and numerics.
//
// On a node: attribute `activation` (string, one of the names below; absent = None) and
// `activation_params` (floats): Clip {min, max}, LeakyRelu {alpha}, HardSigmoid {alpha, beta};
// the others take none.
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"
#include "ops/point_ops.hpp"

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

  // The reference numerics: the point functions the unfused ops' reference kernels use, in
  // double like them, so a fused node computes exactly what the unfused pair did.
  double apply(double x) const {
    return point::fused_activation(kind, x, static_cast<double>(alpha), static_cast<double>(beta));
  }
};

}  // namespace kiln::ops
