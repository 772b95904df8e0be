// QuantizeLinear and DequantizeLinear per tensor between float32 and uint8 / int8 on the CPU
// (QuantizeLinear also from a half-precision engine's bfloat16 or float16):
// the edges of the int8 regions of a static QDQ model (the network's input, a residual Add's
// float32 sum read by the next int8 node, a float32 op between int8 ones), where the reference
// kernels' per-element index and double vectors cost more than the convolutions beside them.
// Bit for bit the reference's numerics: float32 division, ties to even, saturation, NaN to 0;
// q - zero point times the scale in float32. Element by element over memory, so the input and
// the result share whatever layout the neighbours exchange (the int8 convolutions'
// channels-last tensors; BlockedLayouts::any_layout).
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>

#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/quantize_loops.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::cpu {
namespace {

bool is_8bit(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8;
}

// A tensor of one element (a scalar or [1]) of `type`.
bool scalar_of(const ir::Value* v, DataType type) {
  if (!v || !v->type().is_tensor() || v->type().dtype != type || !v->type().shape) return false;
  const Shape& s = *v->type().shape;
  return s.rank() == 0 || (s.rank() == 1 && s[0].is_static() && s[0].value() == 1);
}

// Per tensor, no blocks, no output_dtype or precision of its own: what these kernels compute.
std::string check_params(const ir::Node& node, DataType q_type) {
  for (const auto& [name, a] : node.attributes()) {
    if (name != "axis" && name != "saturate" &&
        !(name == "block_size" && std::holds_alternative<int64_t>(a.storage()) &&
          std::get<int64_t>(a.storage()) == 0)) {
      return "attribute " + name;
    }
  }
  if (!scalar_of(node.input(1), DataType::Float32)) return "the scale is not a float32 scalar";
  if (node.inputs().size() > 2 && node.input(2) && !scalar_of(node.input(2), q_type)) {
    return "the zero point is not a scalar of the quantized type";
  }
  return "";
}

std::string check_quantize(const ir::Node& node) {
  // x in float32, or in a half-precision engine's 16-bit type (passes/convert_to_fp16).
  const ir::Value* x = node.input(0);
  const DataType xt = x && x->type().is_tensor() ? x->type().dtype : DataType::Undefined;
  const DataType as = xt == DataType::BFloat16 || xt == DataType::Float16 ? xt : DataType::Float32;
  if (std::string why = check_float_input(node, 0, as, 0, 8); !why.empty()) return why;
  const ir::Value* y = node.outputs().size() == 1 ? node.output(0) : nullptr;
  if (!y || !is_8bit(y->type().dtype)) return "the output is not uint8 or int8";
  return check_params(node, y->type().dtype);
}

std::string check_dequantize(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (!x || !x->type().is_tensor() || !is_8bit(x->type().dtype)) {
    return "the input is not uint8 or int8";
  }
  const ir::Value* y = node.outputs().size() == 1 ? node.output(0) : nullptr;
  if (!y || y->type().dtype != DataType::Float32) return "the output is not float32";
  return check_params(node, x->type().dtype);
}

int32_t zero_point(std::span<const DeviceTensor> in) {
  if (in.size() < 3 || !in[2].defined()) return 0;
  return in[2].dtype == DataType::UInt8 ? *static_cast<const uint8_t*>(in[2].data)
                                        : *static_cast<const int8_t*>(in[2].data);
}

// Any scale: a zero or negative one divides and multiplies as the reference's does (inf, NaN).
float scale_of(std::span<const DeviceTensor> in) {
  return *static_cast<const float*>(in[1].data);
}

// `fn(begin, end)` over [0, n) in `threads` contiguous shares.
template <typename Fn>
void split(int64_t n, int threads, Fn&& fn) {
#ifdef _OPENMP
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t chunk = (n + count - 1) / count;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    fn(begin, end);
  }
#else
  // Builds without OpenMP (clang's fuzz build): one share.
  (void)threads;
  fn(int64_t{0}, n);
#endif
}

// Each thread's share through the vector loops (backends/cpu/quantize_loops).
template <typename X>
void quantize(const X* x, uint8_t* y, int64_t n, float scale, float zero, int threads) {
  split(n, threads,
        [&](int64_t b, int64_t e) { quantize_to_u8(x + b, y + b, e - b, scale, zero); });
}
template <typename X>
void quantize(const X* x, int8_t* y, int64_t n, float scale, float zero, int threads) {
  split(n, threads,
        [&](int64_t b, int64_t e) { quantize_to_s8(x + b, y + b, e - b, scale, zero); });
}
void dequantize(const uint8_t* x, float* y, int64_t n, float scale, int32_t zero, int threads) {
  split(n, threads,
        [&](int64_t b, int64_t e) { dequantize_from_u8(x + b, y + b, e - b, scale, zero); });
}
void dequantize(const int8_t* x, float* y, int64_t n, float scale, int32_t zero, int threads) {
  split(n, threads,
        [&](int64_t b, int64_t e) { dequantize_from_s8(x + b, y + b, e - b, scale, zero); });
}

class Quantize final : public Kernel {
 public:
  explicit Quantize(const ir::Node& node) : type_(node.output(0)->type().dtype) {}
  std::string_view name() const override { return "cpu.quantize_linear"; }
  BlockedLayouts blocked_layouts() const override { return {.follows = 0, .any_layout = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const float scale = scale_of(in);
    const float zero = static_cast<float>(zero_point(in));
    DeviceTensor y = out.allocate(0, type_, x.dims);
    KILN_CHECK(y.layout == x.layout, ErrorCode::Internal,
               "the input in layout {}, the result in {}", x.layout.to_string(),
               y.layout.to_string());
    const int64_t n = x.storage_numel();
    const int threads =
        threads_for_work(2.0 * static_cast<double>(n), 5.0 * static_cast<double>(n));
    switch (x.dtype) {
      case DataType::BFloat16:
        return run_from(static_cast<const BFloat16*>(x.data), y, n, scale, zero, threads);
      case DataType::Float16:
        return run_from(static_cast<const Float16*>(x.data), y, n, scale, zero, threads);
      default:
        return run_from(static_cast<const float*>(x.data), y, n, scale, zero, threads);
    }
  }

 private:
  template <typename X>
  void run_from(const X* x, DeviceTensor& y, int64_t n, float scale, float zero, int threads) {
    if (type_ == DataType::UInt8) {
      quantize(x, static_cast<uint8_t*>(y.data), n, scale, zero, threads);
    } else {
      quantize(x, static_cast<int8_t*>(y.data), n, scale, zero, threads);
    }
  }

  DataType type_;
};

class Dequantize final : public Kernel {
 public:
  Dequantize() = default;
  std::string_view name() const override { return "cpu.dequantize_linear"; }
  BlockedLayouts blocked_layouts() const override { return {.follows = 0, .any_layout = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const float scale = scale_of(in);
    const int32_t zero = zero_point(in);
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    KILN_CHECK(y.layout == x.layout, ErrorCode::Internal,
               "the input in layout {}, the result in {}", x.layout.to_string(),
               y.layout.to_string());
    const int64_t n = x.storage_numel();
    const int threads = threads_for_work(static_cast<double>(n), 5.0 * static_cast<double>(n));
    auto* py = static_cast<float*>(y.data);
    if (x.dtype == DataType::UInt8) {
      dequantize(static_cast<const uint8_t*>(x.data), py, n, scale, zero, threads);
    } else {
      dequantize(static_cast<const int8_t*>(x.data), py, n, scale, zero, threads);
    }
  }
};

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "QuantizeLinear",
                      .name = "cpu.quantize_linear",
                      .check = check_quantize,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<Quantize>(node);
                      }});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "DequantizeLinear",
                      .name = "cpu.dequantize_linear",
                      .check = check_dequantize,
                      .create = [](const ir::Node&) -> std::unique_ptr<Kernel> {
                        return std::make_unique<Dequantize>();
                      }});

}  // namespace kiln::backends::cpu
