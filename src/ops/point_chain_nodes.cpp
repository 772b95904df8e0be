#include "ops/point_chain_nodes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

namespace kiln::ops {
namespace {

using point::PointOp;

// The ai.onnx op of each step (GeluTanh: Gelu with approximate "tanh"); also the names the
// PointChain node stores.
constexpr std::pair<const char*, PointOp> kOps[] = {
    {"Relu", PointOp::Relu},
    {"Neg", PointOp::Neg},
    {"Abs", PointOp::Abs},
    {"Exp", PointOp::Exp},
    {"Log", PointOp::Log},
    {"Sqrt", PointOp::Sqrt},
    {"Reciprocal", PointOp::Reciprocal},
    {"Tanh", PointOp::Tanh},
    {"Sigmoid", PointOp::Sigmoid},
    {"Erf", PointOp::Erf},
    {"Sign", PointOp::Sign},
    {"Softplus", PointOp::Softplus},
    {"Softsign", PointOp::Softsign},
    {"Elu", PointOp::Elu},
    {"Selu", PointOp::Selu},
    {"Celu", PointOp::Celu},
    {"LeakyRelu", PointOp::LeakyRelu},
    {"HardSigmoid", PointOp::HardSigmoid},
    {"HardSwish", PointOp::HardSwish},
    {"Mish", PointOp::Mish},
    {"ThresholdedRelu", PointOp::ThresholdedRelu},
    {"Clip", PointOp::Clip},
    {"Gelu", PointOp::GeluErf},
    {"GeluTanh", PointOp::GeluTanh},
    {"Silu", PointOp::Silu},
    {"Add", PointOp::Add},
    {"Sub", PointOp::Sub},
    {"Mul", PointOp::Mul},
    {"Div", PointOp::Div},
    {"Pow", PointOp::Pow},
    {"Max", PointOp::Max},
    {"Min", PointOp::Min},
};

const char* name_of(PointOp op) {
  for (const auto& [name, o] : kOps) {
    if (o == op) return name;
  }
  return "?";
}

float attr_or(const ir::Node& node, const char* name, float fallback) {
  return AttrReader(node).attr_float(name, fallback);
}

// Clip's bounds: attributes before opset 11, constant one-element inputs after.
std::string clip_bounds(const ir::Node& node, point::PointStep& step) {
  step.alpha = -std::numeric_limits<float>::infinity();
  step.beta = std::numeric_limits<float>::infinity();
  if (node.opset() < 11) {
    if (node.opset() >= 6) {  // Clip-6 defaults to the float range; Clip-1 had no bound
      step.alpha = std::numeric_limits<float>::lowest();
      step.beta = std::numeric_limits<float>::max();
    }
    step.alpha = attr_or(node, "min", step.alpha);
    step.beta = attr_or(node, "max", step.beta);
    return "";
  }
  for (size_t slot = 1; slot < node.inputs().size() && slot < 3; ++slot) {
    const ir::Value* v = node.input(slot);
    if (!v) continue;
    if (!v->is_constant() || v->constant().numel() != 1 || !dtype_is_float(v->constant().dtype()))
      return "Clip bounds that are not constant floats";
    (slot == 1 ? step.alpha : step.beta) = static_cast<float>(v->constant().double_at(0));
  }
  return "";
}

}  // namespace

std::string point_step_of(const ir::Node& node, point::PointStep& step) {
  const bool kiln_gelu = node.domain() == "ai.kiln" && node.op_type() == "Gelu";
  if (!node.domain().empty() && node.domain() != "ai.onnx" && !kiln_gelu) {
    return fmt::format("{} of domain {}", node.op_type(), node.domain());
  }
  std::optional<PointOp> op;
  for (const auto& [name, o] : kOps) {
    if (node.op_type() == name && o != PointOp::GeluTanh && o != PointOp::Silu) op = o;
  }
  if (!op) return fmt::format("{} is no element-wise op of a point chain", node.op_type());
  step = point::PointStep{};
  step.op = *op;
  const size_t inputs = point::is_binary(*op) ? 2 : (*op == PointOp::Clip ? 3 : 1);
  if (node.inputs().size() > inputs || node.inputs().empty() || !node.input(0) ||
      (point::is_binary(*op) && (node.inputs().size() != 2 || !node.input(1)))) {
    return fmt::format("{} with {} inputs", node.op_type(), node.inputs().size());
  }
  switch (*op) {
    case PointOp::Elu:
    case PointOp::Celu:
    case PointOp::ThresholdedRelu:
      step.alpha = attr_or(node, "alpha", 1.f);
      break;
    case PointOp::LeakyRelu:
      step.alpha = attr_or(node, "alpha", 0.01f);
      break;
    case PointOp::Selu:
      step.alpha = attr_or(node, "alpha", 1.67326319217681884765625f);
      step.beta = attr_or(node, "gamma", 1.05070102214813232421875f);
      break;
    case PointOp::HardSigmoid:
      step.alpha = attr_or(node, "alpha", 0.2f);
      step.beta = attr_or(node, "beta", 0.5f);
      break;
    case PointOp::GeluErf: {
      const std::string approx = AttrReader(node).attr_string("approximate", "none");
      if (approx == "tanh") {
        step.op = PointOp::GeluTanh;
      } else if (approx != "none") {
        return fmt::format("Gelu approximation '{}'", approx);
      }
      break;
    }
    case PointOp::Clip:
      return clip_bounds(node, step);
    default:
      break;
  }
  return "";
}

std::vector<point::PointStep> read_point_chain(const AttrReader& attrs) {
  const std::vector<std::string> ops = attrs.attr_strings("ops");
  const std::vector<int64_t> operands = attrs.attr_ints("operands");
  const std::vector<int64_t> second = attrs.attr_ints("value_second");
  const std::vector<float> params = attrs.attr_floats("params");
  attrs.check(!ops.empty() && ops.size() <= static_cast<size_t>(point::kMaxPointSteps),
              "a point chain of {} steps (1 to {})", ops.size(), point::kMaxPointSteps);
  attrs.check(operands.size() == ops.size() && second.size() == ops.size() &&
                  params.size() == 2 * ops.size(),
              "a point chain's operands, value_second and params must have 1, 1 and 2 entries a "
              "step");
  std::vector<point::PointStep> steps(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    const auto* known = std::find_if(std::begin(kOps), std::end(kOps),
                                     [&](const auto& e) { return ops[k] == e.first; });
    attrs.check(known != std::end(kOps), "unknown point chain op '{}'", ops[k]);
    steps[k].op = known->second;
    // An operand names one of the node's inputs (0: the running value), so no kernel reads a
    // slot the node does not have.
    const auto inputs = static_cast<int64_t>(attrs.node().inputs().size());
    attrs.check(operands[k] >= 0 && operands[k] < point::kMaxPointInputs && operands[k] < inputs,
                "point chain operand {} of a node with {} inputs (at most {})", operands[k], inputs,
                point::kMaxPointInputs);
    steps[k].operand = static_cast<int8_t>(operands[k]);
    steps[k].value_second = second[k] != 0;
    steps[k].alpha = params[2 * k];
    steps[k].beta = params[2 * k + 1];
  }
  return steps;
}

void write_point_chain(ir::Node& node, const std::vector<point::PointStep>& steps) {
  std::vector<std::string> ops;
  std::vector<int64_t> operands, second;
  std::vector<float> params;
  for (const point::PointStep& s : steps) {
    ops.emplace_back(name_of(s.op));
    operands.push_back(s.operand);
    second.push_back(s.value_second ? 1 : 0);
    params.push_back(s.alpha);
    params.push_back(s.beta);
  }
  node.set_attribute("ops", ir::Attribute(std::move(ops)));
  node.set_attribute("operands", ir::Attribute(std::move(operands)));
  node.set_attribute("value_second", ir::Attribute(std::move(second)));
  node.set_attribute("params", ir::Attribute(std::move(params)));
}

}  // namespace kiln::ops
