#pragma once
// Point functions: each element-wise op's math, written once for one element and usable on the
// host and on a GPU (KILN_HOST_DEVICE). The reference kernels call them with double (they compute
// in double and round once), the CPU vector loops with float, the fused activation with double;
// a HIP kernel will call them with float. So every path computes the same formula and a fix lands
// everywhere at once.
//
// Rules for this file: plain templates on the element type T (float or double; the integer forms
// where the op has one), no allocation, no exceptions, no std:: calls that a device compiler lacks
// (std::max / std::min are not device functions: use pmax / pmin, which have their semantics).
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln::point {

// std::max / std::min semantics (the first argument wins ties and NaN comparisons), so results
// are bit-identical to the reference kernels that used them.
template <typename T>
KILN_HOST_DEVICE constexpr T pmax(T a, T b) {
  return (a < b) ? b : a;
}
template <typename T>
KILN_HOST_DEVICE constexpr T pmin(T a, T b) {
  return (b < a) ? b : a;
}

// ---- activations ----

// NaN stays NaN (numpy maximum semantics); -0 stays -0.
template <typename T>
KILN_HOST_DEVICE constexpr T relu(T x) {
  return x < T(0) ? T(0) : x;
}
template <typename T>
KILN_HOST_DEVICE constexpr T leaky_relu(T x, T alpha) {
  return x >= T(0) ? x : alpha * x;
}
template <typename T>
KILN_HOST_DEVICE T elu(T x, T alpha) {
  return x >= T(0) ? x : alpha * std::expm1(x);
}
template <typename T>
KILN_HOST_DEVICE T selu(T x, T alpha, T gamma) {
  return x > T(0) ? gamma * x : gamma * alpha * std::expm1(x);
}
template <typename T>
KILN_HOST_DEVICE T celu(T x, T alpha) {
  return pmax(T(0), x) + pmin(T(0), alpha * std::expm1(x / alpha));
}
// Split by sign so exp never overflows into inf/inf.
template <typename T>
KILN_HOST_DEVICE T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}
template <typename T>
KILN_HOST_DEVICE constexpr T hard_sigmoid(T x, T alpha, T beta) {
  return pmax(T(0), pmin(T(1), alpha * x + beta));
}
template <typename T>
KILN_HOST_DEVICE constexpr T hard_swish(T x) {
  return x * pmax(T(0), pmin(T(1), x / T(6) + T(0.5)));
}
// log(1 + exp(x)) without overflow for large x.
template <typename T>
KILN_HOST_DEVICE T softplus(T x) {
  return pmax(x, T(0)) + std::log1p(std::exp(-std::fabs(x)));
}
template <typename T>
KILN_HOST_DEVICE T softsign(T x) {
  return x / (T(1) + std::fabs(x));
}
template <typename T>
KILN_HOST_DEVICE T tanh(T x) {
  return std::tanh(x);
}
template <typename T>
KILN_HOST_DEVICE T gelu_erf(T x) {
  // Times 1 / sqrt(2) rather than divided by sqrt(2): the same value within a rounding, and no
  // division on the GPU (there an IEEE division and its slow path were a visible share of the
  // Gelu kernel's instructions, BERT's FFN activation).
  constexpr double kSqrt1_2 = 0.7071067811865476;  // 1 / std::numbers::sqrt2
  return T(0.5) * x * (T(1) + std::erf(x * T(kSqrt1_2)));
}
template <typename T>
KILN_HOST_DEVICE T gelu_tanh(T x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi), correctly rounded
  return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x)));
}
template <typename T>
KILN_HOST_DEVICE T mish(T x) {
  return x * std::tanh(softplus(x));
}
template <typename T>
KILN_HOST_DEVICE T swish(T x, T alpha) {
  return x * sigmoid(alpha * x);
}
// Swish with alpha 1 (SiLU): x * sigmoid(x).
template <typename T>
KILN_HOST_DEVICE T silu(T x) {
  return x * sigmoid(x);
}
template <typename T>
KILN_HOST_DEVICE constexpr T thresholded_relu(T x, T alpha) {
  return x > alpha ? x : T(0);
}
// ONNX Clip: the lower bound first, so lo > hi gives hi; NaN stays NaN. A missing bound is
// -inf / +inf (or the integer type's lowest / max).
template <typename T>
KILN_HOST_DEVICE constexpr T clip(T x, T lo, T hi) {
  const T v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

// ---- unary math (float types) ----

template <typename T>
KILN_HOST_DEVICE T sqrt(T x) {
  return std::sqrt(x);
}
template <typename T>
KILN_HOST_DEVICE T exp(T x) {
  return std::exp(x);
}
template <typename T>
KILN_HOST_DEVICE T log(T x) {
  return std::log(x);
}
template <typename T>
KILN_HOST_DEVICE constexpr T reciprocal(T x) {
  return T(1) / x;
}
template <typename T>
KILN_HOST_DEVICE T erf(T x) {
  return std::erf(x);
}
// Sign of a float: NaN stays NaN, +-0 gives +0 as the reference always did.
template <typename T>
KILN_HOST_DEVICE constexpr T sign(T x) {
  if (x != x) return x;
  return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
}

// ---- unary math (every numeric type) ----

// Integers: abs(min) wraps to min like two's complement hardware, without UB.
template <typename T>
KILN_HOST_DEVICE constexpr T abs(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fabs(x);
  } else if constexpr (std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
  } else {
    return x;
  }
}
template <typename T>
KILN_HOST_DEVICE constexpr T neg(T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(U(0) - static_cast<U>(x));
  } else {
    return -x;
  }
}

// ---- binary (every numeric type; integers wrap like hardware, without UB) ----

template <typename T>
KILN_HOST_DEVICE constexpr T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return T(a + b);
  }
}
template <typename T>
KILN_HOST_DEVICE constexpr T sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return T(a - b);
  }
}
template <typename T>
KILN_HOST_DEVICE constexpr T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // uint64 product: narrower unsigned types would promote to int and could overflow (UB).
    return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return T(a * b);
  }
}
// Integers: the caller refuses b == 0 (an error, which a point function cannot raise); min / -1
// wraps to min.
template <typename T>
KILN_HOST_DEVICE constexpr T div(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) {
      if (a == std::numeric_limits<T>::min() && b == T(-1)) return a;
    }
    return static_cast<T>(a / b);
  } else {
    return T(a / b);
  }
}
template <typename T>
KILN_HOST_DEVICE T pow(T a, T b) {
  return std::pow(a, b);
}
// numpy maximum / minimum: a NaN operand wins (the first one when both are NaN).
template <typename T>
KILN_HOST_DEVICE constexpr T maximum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return b > a ? b : a;
}
template <typename T>
KILN_HOST_DEVICE constexpr T minimum(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return b < a ? b : a;
}

// A fused activation by kind: `Kind` is any enum with ops::Activation's enumerators (ops'
// FusedActivation, the GPU epilogue's GemmActivation), so the reference, the CPU and every
// fused GPU kernel take one list of formulas. alpha, beta: Clip's min and max, LeakyRelu's
// alpha, HardSigmoid's alpha and beta.
template <typename Kind, typename T>
KILN_HOST_DEVICE T fused_activation(Kind kind, T x, T alpha, T beta) {
  switch (kind) {
    case Kind::None:
      return x;
    case Kind::Relu:
      return relu(x);
    case Kind::Clip:
      return clip(x, alpha, beta);
    case Kind::Sigmoid:
      return sigmoid(x);
    case Kind::Silu:
      return silu(x);
    case Kind::HardSwish:
      return hard_swish(x);
    case Kind::HardSigmoid:
      return hard_sigmoid(x, alpha, beta);
    case Kind::LeakyRelu:
      return leaky_relu(x, alpha);
    case Kind::Tanh:
      return tanh(x);
    case Kind::Gelu:
      return gelu_erf(x);
    case Kind::GeluTanh:
      return gelu_tanh(x);
  }
  return x;
}

}  // namespace kiln::point
