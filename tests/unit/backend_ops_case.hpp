#pragma once
// One case of the every-backend harness (backend_ops_test.cpp): a one-node graph, its inputs
// and attributes, the fast kernel the CPU must pick and, for a case about a GPU kernel, the
// one the GPU must pick. Shared by the files that hold parts of the case table.
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "ir/graph.hpp"

namespace kiln::backend_ops {

struct In {
  std::vector<int64_t> dims;
  bool constant = false;                 // an initializer (weights) rather than a graph input
  bool absent = false;                   // an empty optional slot
  DataType dtype = DataType::Undefined;  // Undefined: the case's dtype
  std::vector<int64_t> values;           // integer / bool contents (else random)
  std::vector<double> reals;             // float contents (else random)
};

using Attr = std::pair<std::string, ir::Attribute>;
inline Attr i(const char* name, int64_t v) {
  return {name, ir::Attribute(v)};
}
inline Attr f(const char* name, float v) {
  return {name, ir::Attribute(v)};
}
inline Attr s(const char* name, const char* v) {
  return {name, ir::Attribute(std::string(v))};
}
inline Attr ints(const char* name, std::vector<int64_t> v) {
  return {name, ir::Attribute(std::move(v))};
}
inline Attr floats(const char* name, std::vector<float> v) {
  return {name, ir::Attribute(std::move(v))};
}

struct Case {
  std::string name;
  std::string op;
  std::vector<In> inputs;
  std::vector<Attr> attrs;
  std::string kernel;  // the fast kernel the CPU executor must pick ("reference": none)
  std::string domain;  // "" or "ai.kiln"
  int opset = 17;
  bool positive = false;               // inputs in (0.1, 2) instead of (-2, 2) (Sqrt)
  int outputs = 1;                     // outputs the node has, all graph outputs and all compared
  std::string gpu;                     // set: the GPU must run the case with this kernel
  DataType dtype = DataType::Float32;  // of the float inputs
  std::string cpu_skip;  // set: the CPU run is skipped for this reason (a known CPU deviation)
  bool special = false;  // fed floats include NaN, +inf and -inf (IsNaN, IsInf)
  // The GPU runs the case with Kiln's own kernels preferred (KernelPreference::Own), so that an
  // own kernel is checked where a vendor library's is the default (gpu.own.gemm on NVIDIA).
  bool gpu_own = false;
  // Roundings to the float16 / bfloat16 element type on the reference's way (1: it computes
  // wide and rounds once, as the fast kernels do). The ai.kiln fused ops' reference rounds the
  // product, then the bias and activation: two, and a steep activation widens the first.
  int reference_roundings = 1;
};

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

inline In x(std::vector<int64_t> d) {
  return {std::move(d)};
}
inline In w(std::vector<int64_t> d) {
  return {std::move(d), true};
}
inline In none() {
  return {{}, false, true};
}
// A constant integer tensor (indices, axes, shapes, slice bounds).
inline In ints_in(std::vector<int64_t> d, std::vector<int64_t> values,
                  DataType t = DataType::Int64) {
  return {std::move(d), true, false, t, std::move(values)};
}
// A constant float32 tensor with the given contents (Resize's scales and roi).
inline In reals_in(std::vector<int64_t> d, std::vector<double> values) {
  return {std::move(d), true, false, DataType::Float32, {}, std::move(values)};
}
// A graph input of integers with the given contents (fed, not constant).
inline In ints_fed(std::vector<int64_t> d, std::vector<int64_t> values,
                   DataType t = DataType::Int64) {
  return {std::move(d), false, false, t, std::move(values)};
}
// A graph input of another element type than the case's (random contents; bool: 0 or 1).
inline In typed(std::vector<int64_t> d, DataType t) {
  return {std::move(d), false, false, t, {}};
}

inline constexpr const char* kKiln = "ai.kiln";

// Appends `c` and its float16 twin ("_f16"), which the CPU runs with `cpu16`.
inline void push_with_f16(std::vector<Case>& out, Case c, const char* cpu16 = "cpu.fp16") {
  Case h = c;
  h.name += "_f16";
  h.dtype = DataType::Float16;
  h.kernel = cpu16;
  out.push_back(std::move(c));
  out.push_back(std::move(h));
}

// The GPU kernels' cases (backend_ops_gpu_cases.cpp): element-wise and broadcast, softmax,
// normalizations, data movement, reductions and attention, each in float32 and float16.
std::vector<Case> gpu_cases();
// Kiln's own GEMM (gpu.own.gemm, backend_ops_gemm_cases.cpp), float32 and float16.
std::vector<Case> gpu_gemm_cases();
// Kiln's own depthwise convolution (gpu.depthwise_conv, backend_ops_depthwise_cases.cpp).
std::vector<Case> gpu_depthwise_cases();
// Kiln's own implicit-GEMM convolution (gpu.own.conv, backend_ops_conv_cases.cpp).
std::vector<Case> gpu_conv_cases();
// Kiln's own pooling (gpu.own.pool, backend_ops_pool_cases.cpp).
std::vector<Case> gpu_pool_cases();
// The GPU's Resize (gpu.resize, backend_ops_resize_cases.cpp).
std::vector<Case> gpu_resize_cases();
// The GPU's LSTM (gpu.lstm, backend_ops_lstm_cases.cpp).
std::vector<Case> gpu_lstm_cases();
// com.microsoft DynamicQuantizeLSTM on the CPU (backend_ops_dynamic_lstm_cases.cpp).
std::vector<Case> dynamic_lstm_cases();
// The GPU's PointChain (gpu.point_chain, backend_ops_point_chain_cases.cpp).
std::vector<Case> gpu_point_chain_cases();

}  // namespace kiln::backend_ops
