#pragma once
// A chain of element-wise ops as one program (ai.kiln PointChain, made by
// passes/fuse_point_chains): each step applies one unary or binary op's point function
// (point_ops.hpp) to the running value, a binary step's other operand being one of the node's
// inputs (broadcast to the running value's shape) or the running value itself. Written once for
// the reference (double) and the GPU kernel (float). Plain header: host and device code include it.
#include <cstdint>

#include "ops/point_ops.hpp"

namespace kiln::point {

enum class PointOp : uint8_t {
  // unary (alpha / beta as the op's attributes)
  Relu,
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Reciprocal,
  Tanh,
  Sigmoid,
  Erf,
  Sign,
  Softplus,
  Softsign,
  Elu,          // alpha
  Selu,         // alpha, gamma (beta)
  Celu,         // alpha
  LeakyRelu,    // alpha
  HardSigmoid,  // alpha, beta
  HardSwish,
  Mish,
  ThresholdedRelu,  // alpha
  Clip,             // min (alpha), max (beta)
  GeluErf,
  GeluTanh,
  Silu,  // no ONNX op of its own: a fused activation's pass after a GEMM
  // binary
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min
};

KILN_HOST_DEVICE constexpr bool is_binary(PointOp op) {
  return op >= PointOp::Add;
}

// Most steps and inputs (the running value's source and three operands) a chain has: the GPU
// kernel takes the program by value and walks the inputs' broadcast strides together.
inline constexpr int kMaxPointSteps = 8;
inline constexpr int kMaxPointInputs = 4;

struct PointStep {
  PointOp op = PointOp::Relu;
  // A binary step's other operand: the node input of that index (1 .. kMaxPointInputs - 1), or
  // 0 for the running value itself (x * x).
  int8_t operand = 0;
  bool value_second = false;  // op(operand, value) instead of op(value, operand)
  float alpha = 0.f, beta = 0.f;
};

template <typename T>
KILN_HOST_DEVICE T apply_point_step(const PointStep& s, T v, T operand) {
  const T a = static_cast<T>(s.alpha), b = static_cast<T>(s.beta);
  const T lhs = s.value_second ? operand : v, rhs = s.value_second ? v : operand;
  switch (s.op) {
    case PointOp::Relu:
      return relu(v);
    case PointOp::Neg:
      return neg(v);
    case PointOp::Abs:
      return abs(v);
    case PointOp::Exp:
      return exp(v);
    case PointOp::Log:
      return log(v);
    case PointOp::Sqrt:
      return sqrt(v);
    case PointOp::Reciprocal:
      return reciprocal(v);
    case PointOp::Tanh:
      return tanh(v);
    case PointOp::Sigmoid:
      return sigmoid(v);
    case PointOp::Erf:
      return erf(v);
    case PointOp::Sign:
      return sign(v);
    case PointOp::Softplus:
      return softplus(v);
    case PointOp::Softsign:
      return softsign(v);
    case PointOp::Elu:
      return elu(v, a);
    case PointOp::Selu:
      return selu(v, a, b);
    case PointOp::Celu:
      return celu(v, a);
    case PointOp::LeakyRelu:
      return leaky_relu(v, a);
    case PointOp::HardSigmoid:
      return hard_sigmoid(v, a, b);
    case PointOp::HardSwish:
      return hard_swish(v);
    case PointOp::Mish:
      return mish(v);
    case PointOp::ThresholdedRelu:
      return thresholded_relu(v, a);
    case PointOp::Clip:
      return clip(v, a, b);
    case PointOp::GeluErf:
      return gelu_erf(v);
    case PointOp::GeluTanh:
      return gelu_tanh(v);
    case PointOp::Silu:
      return silu(v);
    case PointOp::Add:
      return add(lhs, rhs);
    case PointOp::Sub:
      return sub(lhs, rhs);
    case PointOp::Mul:
      return mul(lhs, rhs);
    case PointOp::Div:
      return div(lhs, rhs);
    case PointOp::Pow:
      return pow(lhs, rhs);
    case PointOp::Max:
      return maximum(lhs, rhs);
    case PointOp::Min:
      return minimum(lhs, rhs);
  }
  return v;
}

}  // namespace kiln::point
