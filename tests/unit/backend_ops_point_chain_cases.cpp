// The harness cases of the GPU's PointChain (gpu.point_chain, made by passes/fuse_point_chains):
// operands of the chain's shape (element by element), and operands that broadcast (a channel
// bias, a scalar) through strides; the running value used twice and on the right of a binary
// op; float32, float16 and bfloat16. The CPU runs the reference (no fast kernel of its own).
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.point_chain";

struct Step {
  const char* op;
  int64_t operand;
  bool value_second;
  float alpha, beta;
};

Case chain(std::string name, std::vector<In> inputs, const std::vector<Step>& steps) {
  std::vector<std::string> ops;
  std::vector<int64_t> operands, second;
  std::vector<float> params;
  for (const Step& s : steps) {
    ops.emplace_back(s.op);
    operands.push_back(s.operand);
    second.push_back(s.value_second ? 1 : 0);
    params.push_back(s.alpha);
    params.push_back(s.beta);
  }
  return {.name = "gpu_point_chain_" + std::move(name),
          .op = "PointChain",
          .inputs = std::move(inputs),
          .attrs = {{"ops", ir::Attribute(std::move(ops))},
                    ints("operands", std::move(operands)),
                    ints("value_second", std::move(second)),
                    floats("params", std::move(params))},
          .kernel = "reference",
          .domain = kKiln,
          .opset = 1,
          .gpu = kGpu};
}

}  // namespace

std::vector<Case> gpu_point_chain_cases() {
  std::vector<Case> c;
  const Case same = chain("same_shape", {x({3, 5, 7}), x({3, 5, 7})},
                          {{"Add", 1, false, 0, 0},
                           {"Relu", 0, false, 0, 0},
                           {"Mul", 0, false, 0, 0},
                           {"Sub", 1, true, 0, 0},
                           {"Sigmoid", 0, false, 0, 0}});
  push_with_f16(c, same, "reference");
  const Case broadcast = chain("broadcast", {x({2, 4, 5, 6}), w({4, 1, 1}), w({})},
                               {{"Add", 1, false, 0, 0},
                                {"Clip", 0, false, -0.5f, 1.5f},
                                {"Mul", 2, false, 0, 0},
                                {"GeluTanh", 0, false, 0, 0},
                                {"Max", 1, true, 0, 0},
                                {"LeakyRelu", 0, false, 0.1f, 0},
                                {"HardSigmoid", 0, false, 0.3f, 0.4f},
                                {"Sub", 2, true, 0, 0}});
  push_with_f16(c, broadcast, "reference");
  Case b = broadcast;
  b.name += "_bf16";
  b.dtype = DataType::BFloat16;
  c.push_back(std::move(b));
  return c;
}

}  // namespace kiln::backend_ops
