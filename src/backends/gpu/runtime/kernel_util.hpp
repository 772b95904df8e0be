#pragma once
// Small pieces the GPU kernel families share on the host side: the float element types, the
// common checks of a node's declared values, constant inputs read as numbers, and raising a
// launcher's status.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/gpu/gpu_backend.hpp"
#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {

// 16-bit matrix instructions the tile ops (kernels/mma_tile.hpp) are built for: mma.sync m16n8k16
// on every NVIDIA arch the library is built for (sm_80+), MFMA 16x16x16 on CDNA; RDNA 2 takes FMA
// tiles.
inline bool has_matrix_tiles(const GpuDeviceInfo& info) {
  if (info.target.vendor == "cuda") return true;
  const std::string& arch = info.target.arch;
  return arch == "gfx908" || arch == "gfx90a" || arch == "gfx940";
}

// A whole-number override from the environment, for measuring a kernel's choice
// (KILN_GPU_ATTENTION_WAVES, KILN_GPU_LN_ROWS): `fallback` when unset or not a number.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  int n = 0;
  const char* end = v + std::strlen(v);
  auto [p, ec] = std::from_chars(v, end, n);
  return ec == std::errc() && p == end ? n : fallback;
}

// Hopper's warpgroup matrix instructions (kernels/wgmma_tile.hpp), which the own GEMM's sm_90
// float16 tiles take: NVIDIA sm_90 (the library carries those kernels as sm_90a code). By
// default since they ran there (2026-12-06, H100: every harness case on every wgmma tile, 1.27x
// cuBLASLt's time in geomean against mma.sync's 1.57x); KILN_GPU_WGMMA=0 keeps mma.sync.
inline bool has_wgmma(const GpuDeviceInfo& info) {
  const char* off = std::getenv("KILN_GPU_WGMMA");
  return info.target.vendor == "cuda" && info.target.arch == "sm_90" &&
         !(off && std::strcmp(off, "0") == 0);
}

// The pieces of a kernel's tactic text (Kernel::tactics: "key,..=choice,..;..."): `text` split
// at `sep`, and a comma-separated list of integers (false when it is not one).
inline std::vector<std::string_view> split_text(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}
inline bool parse_int_list(std::string_view text, std::vector<int64_t>& out) {
  for (std::string_view part : split_text(text, ',')) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || end != part.data() + part.size()) return false;
    out.push_back(v);
  }
  return true;
}

// Hands a kernel run by another (a tactic's candidate) the output its caller allocated already.
class SameOutput final : public KernelOutputs {
 public:
  explicit SameOutput(const DeviceTensor& y) : y_(y) {}
  DeviceTensor allocate(size_t, DataType, std::vector<int64_t>) override { return y_; }

 private:
  DeviceTensor y_;
};

inline std::optional<kernels::FloatType> float_type(DataType t) {
  switch (t) {
    case DataType::Float32:
      return kernels::FloatType::F32;
    case DataType::Float16:
      return kernels::FloatType::F16;
    case DataType::BFloat16:
      return kernels::FloatType::BF16;
    default:
      return std::nullopt;
  }
}

// The declared type of a value, or nullptr when it is absent or not a tensor.
inline const TypeInfo* tensor_type(const ir::Value* v) {
  return v && v->type().is_tensor() ? &v->type() : nullptr;
}

// "" when input `slot` is a float32/float16/bfloat16 tensor, else the reason.
inline std::string check_float_input(const ir::Node& node, size_t slot) {
  const TypeInfo* t = tensor_type(node.input(slot));
  if (!t) return fmt::format("{} input {} is missing or not a tensor", node.op_type(), slot);
  if (!float_type(t->dtype)) {
    return fmt::format("{} on the GPU takes float32, float16 or bfloat16, not {} (input {})",
                       node.op_type(), t->to_string(), slot);
  }
  return "";
}

// Bytes per element when the data-movement kernels can move `t` (1, 2, 4 or 8 bytes, whole
// bytes), else 0.
inline int movable_size(DataType t) {
  return dtype_is_float(t) || dtype_is_integer(t) || t == DataType::Bool
             ? static_cast<int>(dtype_size(t))
             : 0;
}

// "" when input `slot` is a tensor the data-movement kernels can move, else the reason.
inline std::string check_movable_input(const ir::Node& node, size_t slot) {
  const TypeInfo* t = tensor_type(node.input(slot));
  if (!t) return fmt::format("{} input {} is missing or not a tensor", node.op_type(), slot);
  if (!movable_size(t->dtype))
    return fmt::format("{} on the GPU moves numeric and bool elements, not {} (input {})",
                       node.op_type(), t->to_string(), slot);
  return "";
}

// The declared dims when every one is static.
inline std::optional<std::vector<int64_t>> static_dims(const ir::Value* v) {
  const TypeInfo* t = tensor_type(v);
  if (!t || !t->shape || !t->shape->is_static()) return std::nullopt;
  return t->shape->values();
}

// Whether every input's declared shape is known and equal to input 0's (then element-wise
// kernels may read them all in one shared layout, blocked alike).
inline bool same_declared_shapes(const ir::Node& node) {
  const TypeInfo* x = tensor_type(node.input(0));
  if (!x || !x->shape) return false;
  for (const ir::Value* v : node.inputs()) {
    const TypeInfo* t = tensor_type(v);
    if (!t || !t->shape || !(*t->shape == *x->shape)) return false;
  }
  return true;
}

// The declared rank, when known.
inline std::optional<int64_t> known_rank(const ir::Value* v) {
  const TypeInfo* t = tensor_type(v);
  if (!t || !t->shape) return std::nullopt;
  return static_cast<int64_t>(t->shape->rank());
}

// A constant input's elements as int64 (an int32/int64 initializer), or nullopt.
inline std::optional<std::vector<int64_t>> constant_ints(const ir::Node& node, size_t slot) {
  const ir::Value* v = node.input(slot);
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->constant();
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::Int64) {
    std::memcpy(out.data(), t.raw_data(), out.size() * sizeof(int64_t));
  } else if (t.dtype() == DataType::Int32) {
    const auto* p = static_cast<const int32_t*>(t.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    return std::nullopt;
  }
  return out;
}

// A constant input's elements as double (a float32/float64 initializer), or nullopt.
inline std::optional<std::vector<double>> constant_floats(const ir::Node& node, size_t slot) {
  const ir::Value* v = node.input(slot);
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->constant();
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::Float64) {
    std::memcpy(out.data(), t.raw_data(), out.size() * sizeof(double));
  } else if (t.dtype() == DataType::Float32) {
    const auto* p = static_cast<const float*>(t.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    return std::nullopt;
  }
  return out;
}

// A constant one-element float input as float32, or nullopt.
inline std::optional<float> constant_scalar(const ir::Node& node, size_t slot) {
  const ir::Value* v = node.input(slot);
  if (!v || !v->is_constant() || v->constant().numel() != 1) return std::nullopt;
  const Tensor& t = v->constant();
  uint16_t bits = 0;
  switch (t.dtype()) {
    case DataType::Float32: {
      float f;
      std::memcpy(&f, t.raw_data(), sizeof f);
      return f;
    }
    case DataType::Float16:
      std::memcpy(&bits, t.raw_data(), sizeof bits);
      return half_bits_to_float(bits);
    case DataType::BFloat16:
      std::memcpy(&bits, t.raw_data(), sizeof bits);
      return bfloat16_bits_to_float(bits);
    default:
      return std::nullopt;
  }
}

// ONNX's negative axes counted from the end; nullopt when outside [-rank, rank).
inline std::optional<int64_t> normalized_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

// Raises a launcher's failed status as the kernel's error.
inline void check_launch(hipError_t status, std::string_view kernel) {
  if (status != hipSuccess) runtime_fail(status, std::string(kernel).c_str());
}

}  // namespace kiln::backends::gpu
