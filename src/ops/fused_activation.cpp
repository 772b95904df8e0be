#include "ops/fused_activation.hpp"

#include <array>
#include <utility>

namespace kiln::ops {
namespace {

constexpr std::array<std::pair<Activation, const char*>, 11> kNames = {{
    {Activation::None, "None"},
    {Activation::Relu, "Relu"},
    {Activation::Clip, "Clip"},
    {Activation::Sigmoid, "Sigmoid"},
    {Activation::Silu, "Silu"},
    {Activation::HardSwish, "HardSwish"},
    {Activation::HardSigmoid, "HardSigmoid"},
    {Activation::LeakyRelu, "LeakyRelu"},
    {Activation::Tanh, "Tanh"},
    {Activation::Gelu, "Gelu"},
    {Activation::GeluTanh, "GeluTanh"},
}};

size_t param_count(Activation a) {
  switch (a) {
    case Activation::Clip:
    case Activation::HardSigmoid:
      return 2;
    case Activation::LeakyRelu:
      return 1;
    default:
      return 0;
  }
}

}  // namespace

const char* FusedActivation::name(Activation a) {
  for (const auto& [kind, text] : kNames) {
    if (kind == a) return text;
  }
  return "?";
}

FusedActivation FusedActivation::from_node(const AttrReader& attrs) {
  FusedActivation out;
  std::string text = attrs.attr_string("activation", "None");
  bool known = false;
  for (const auto& [kind, name] : kNames) {
    if (text == name) {
      out.kind = kind;
      known = true;
    }
  }
  attrs.check(known, "unknown fused activation '{}'", text);
  std::vector<float> params = attrs.attr_floats("activation_params", {});
  attrs.check(params.size() == param_count(out.kind),
              "fused activation {} takes {} parameters, got {}", text, param_count(out.kind),
              params.size());
  if (!params.empty()) out.alpha = params[0];
  if (params.size() > 1) out.beta = params[1];
  return out;
}

void FusedActivation::set_on(ir::Node& node) const {
  node.set_attribute("activation", ir::Attribute(std::string(name(kind))));
  std::vector<float> params;
  if (param_count(kind) >= 1) params.push_back(alpha);
  if (param_count(kind) >= 2) params.push_back(beta);
  if (!params.empty()) node.set_attribute("activation_params", ir::Attribute(params));
}

}  // namespace kiln::ops
