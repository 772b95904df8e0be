#pragma once
// A fused node's activation (ai.kiln FusedGemm / FusedMatMul / FusedConv: `activation` and
// `activation_params`, ops/fused_activation.hpp) as the element-wise kernel's parameters, for
// kernels that run it as a pass of their own after a library call whose epilogue lacks it.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"

namespace kiln::backends::gpu {

// "" and `out` set when the node's activation maps to an element-wise op, else why not.
inline std::string fused_activation_params(const ir::Node& node, kernels::UnaryParams& out) {
  using kernels::UnaryOp;
  const std::string act = string_attr(node, "activation", "None");
  const std::vector<float> p = floats_attr(node, "activation_params");
  auto need = [&](size_t n) {
    return p.size() == n ? std::string()
                         : fmt::format("fused {} takes {} parameters, got {}", act, n, p.size());
  };
  out = {};
  if (act == "Relu") {
    out.op = UnaryOp::Relu;
  } else if (act == "Sigmoid") {
    out.op = UnaryOp::Sigmoid;
  } else if (act == "Tanh") {
    out.op = UnaryOp::Tanh;
  } else if (act == "Silu") {
    out.op = UnaryOp::Silu;
  } else if (act == "HardSwish") {
    out.op = UnaryOp::HardSwish;
  } else if (act == "Gelu") {
    out.op = UnaryOp::GeluErf;
  } else if (act == "GeluTanh") {
    out.op = UnaryOp::GeluTanh;
  } else if (act == "Clip") {
    if (std::string why = need(2); !why.empty()) return why;
    out = {UnaryOp::Clip, p[0], p[1]};
  } else if (act == "LeakyRelu") {
    if (std::string why = need(1); !why.empty()) return why;
    out = {UnaryOp::LeakyRelu, p[0], 0.f};
  } else if (act == "HardSigmoid") {
    if (std::string why = need(2); !why.empty()) return why;
    out = {UnaryOp::HardSigmoid, p[0], p[1]};
  } else {
    return fmt::format("fused activation {} is not supported on the GPU yet", act);
  }
  return "";
}

}  // namespace kiln::backends::gpu
