#include "passes/activation_patterns.hpp"

#include <cmath>
#include <limits>

namespace kiln::passes {
namespace {

using ops::Activation;
using ops::FusedActivation;

// Clip's bounds: attributes before opset 11 (float limits by default from opset 6), optional
// constant scalar inputs from 11. nullopt when a bound is not a constant or cannot be held
// exactly in the float parameters of a fused activation.
std::optional<FusedActivation> clip_bounds(const ir::Node& clip) {
  const double inf = std::numeric_limits<double>::infinity();
  double lo = -inf, hi = inf;
  if (clip.opset() < 11) {
    if (clip.opset() >= 6) {
      lo = std::numeric_limits<float>::lowest();
      hi = std::numeric_limits<float>::max();
    }
    if (clip.attribute("min")) lo = float_attr(clip, "min", 0);
    if (clip.attribute("max")) hi = float_attr(clip, "max", 0);
  } else {
    for (size_t i = 1; i < 3; ++i) {
      const ir::Value* b = clip.input(i);
      if (!b) continue;
      std::optional<double> v = scalar_constant(b);
      if (!v) return std::nullopt;
      (i == 1 ? lo : hi) = *v;
    }
  }
  if (!(lo <= hi) || static_cast<double>(static_cast<float>(lo)) != lo ||
      static_cast<double>(static_cast<float>(hi)) != hi) {
    return std::nullopt;
  }
  FusedActivation a;
  a.kind = Activation::Clip;
  a.alpha = static_cast<float>(lo);
  a.beta = static_cast<float>(hi);
  return a;
}

// The activation a single-input node applies, if it is one.
std::optional<FusedActivation> unary_activation(const ir::Node& n) {
  FusedActivation a;
  if (is_op(&n, "Relu")) {
    a.kind = Activation::Relu;
  } else if (is_op(&n, "Sigmoid")) {
    a.kind = Activation::Sigmoid;
  } else if (is_op(&n, "Tanh")) {
    a.kind = Activation::Tanh;
  } else if (is_op(&n, "HardSwish")) {
    a.kind = Activation::HardSwish;
  } else if (is_op(&n, "LeakyRelu")) {
    a.kind = Activation::LeakyRelu;
    a.alpha = float_attr(n, "alpha", 0.01f);
  } else if (is_op(&n, "HardSigmoid")) {
    a.kind = Activation::HardSigmoid;
    a.alpha = float_attr(n, "alpha", 0.2f);
    a.beta = float_attr(n, "beta", 0.5f);
  } else if (is_op(&n, "Swish")) {
    if (float_attr(n, "alpha", 1.0f) != 1.0f) return std::nullopt;
    a.kind = Activation::Silu;
  } else if (is_op(&n, "Clip")) {
    return clip_bounds(n);
  } else if (is_op(&n, "Gelu") || is_kiln_op(&n, "Gelu")) {
    const ir::Attribute* approx = n.attribute("approximate");
    std::string mode = approx && std::holds_alternative<std::string>(approx->storage())
                           ? std::get<std::string>(approx->storage())
                           : "none";
    if (mode == "none") {
      a.kind = Activation::Gelu;
    } else if (mode == "tanh") {
      a.kind = Activation::GeluTanh;
    } else {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  return a;
}

}  // namespace

std::optional<ActivationMatch> match_activation(const Rewriter& rw, ir::Value* v) {
  if (!v || rw.touched(v) || rw.graph().is_output(v) || !is_float_value(v)) return std::nullopt;
  const std::vector<ir::Node*>& readers = rw.readers(v);
  if (readers.size() == 1) {
    ir::Node* n = readers[0];
    if (n->input(0) != v || n->outputs().size() != 1 || !n->output(0)) return std::nullopt;
    for (size_t i = 1; i < n->inputs().size(); ++i) {
      if (n->input(i) == v) return std::nullopt;
    }
    std::optional<FusedActivation> a = unary_activation(*n);
    if (!a) return std::nullopt;
    return ActivationMatch{*a, n->output(0), {n}};
  }
  // x * Sigmoid(x) and x * HardSigmoid(x): the gate and the Mul are v's two readers.
  if (readers.size() != 2) return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    ir::Node* gate = readers[first];
    ir::Node* mul = readers[1 - first];
    if (!is_op(mul, "Mul") || gate->input(0) != v || gate->outputs().size() != 1) continue;
    if (other_input(*mul, v) != gate->output(0) || !rw.used_only_by(gate->output(0), {mul})) {
      continue;
    }
    FusedActivation a;
    if (is_op(gate, "Sigmoid")) {
      a.kind = Activation::Silu;
    } else if (is_op(gate, "HardSigmoid") &&
               std::fabs(float_attr(*gate, "alpha", 0.2f) - 1.0f / 6.0f) < 1e-6f &&
               float_attr(*gate, "beta", 0.5f) == 0.5f) {
      a.kind = Activation::HardSwish;
    } else {
      continue;
    }
    return ActivationMatch{a, mul->output(0), {mul, gate}};
  }
  return std::nullopt;
}

}  // namespace kiln::passes
