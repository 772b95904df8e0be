// The GPU backend's logic ops as kernel-table entries under "gpu": IsNaN and IsInf (float32,
// float16, bfloat16 in; bool out), Not, and And / Or / Xor with numpy broadcasting. Attention
// masks are built from these (a transformer's exported mask: IsNaN, And, Where), so without
// them each would cross to the CPU and back.
#include <fmt/format.h>

#include <string>

#include "backends/gpu/kernels/logic.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::BoolOp;
using kernels::FloatTest;

std::string check_bool_input(const ir::Node& node, size_t slot) {
  const TypeInfo* t = tensor_type(node.input(slot));
  if (!t || t->dtype != DataType::Bool) {
    return fmt::format("{} on the GPU takes bool tensors (input {})", node.op_type(), slot);
  }
  return "";
}

std::string check_single_output(const ir::Node& node) {
  return node.outputs().size() == 1 && node.output(0) ? "" : "expected one output";
}

// IsNaN, IsInf (with its detect_positive / detect_negative attributes).
FloatTest float_test_of(const ir::Node& node) {
  if (node.op_type() == "IsNaN") return FloatTest::IsNaN;
  const bool pos = int_attr(node, "detect_positive", 1) != 0;
  const bool neg = int_attr(node, "detect_negative", 1) != 0;
  return pos && neg ? FloatTest::IsInf : pos ? FloatTest::IsPosInf : FloatTest::IsNegInf;
}

std::string check_float_test(const ir::Node& node) {
  if (node.inputs().size() != 1) return "expected one input";
  if (std::string why = check_float_input(node, 0); !why.empty()) return why;
  if (node.op_type() == "IsInf" && int_attr(node, "detect_positive", 1) == 0 &&
      int_attr(node, "detect_negative", 1) == 0) {
    // Detects nothing: the reference's all-false answer is not worth a kernel.
    return "IsInf detecting neither infinity";
  }
  return check_single_output(node);
}

class FloatTestKernel final : public Kernel {
 public:
  explicit FloatTestKernel(const ir::Node& node)
      : test_(float_test_of(node)), dtype_(node.input(0)->type().dtype), label_(node.name()) {}
  std::string_view name() const override { return "gpu.float_test"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == dtype_ && x.layout.is_row_major(), ErrorCode::Internal,
               "gpu.float_test {}: input is {} {}, the kernel was made for row-major {}", label_,
               dtype_name(x.dtype), x.layout.to_string(), dtype_name(dtype_));
    DeviceTensor y = outputs.allocate(0, DataType::Bool, x.dims);
    check_launch(
        kernels::launch_float_test(test_, *float_type(dtype_), x.data, static_cast<bool*>(y.data),
                                   x.numel(), gpu_stream(stream).handle()),
        "gpu.float_test");
  }

 private:
  FloatTest test_;
  DataType dtype_;
  std::string label_;
};

std::string check_not(const ir::Node& node) {
  if (node.inputs().size() != 1) return "expected one input";
  if (std::string why = check_bool_input(node, 0); !why.empty()) return why;
  return check_single_output(node);
}

class NotKernel final : public Kernel {
 public:
  std::string_view name() const override { return "gpu.not"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    DeviceTensor y = outputs.allocate(0, DataType::Bool, x.dims);
    check_launch(kernels::launch_not(static_cast<const bool*>(x.data), static_cast<bool*>(y.data),
                                     x.numel(), gpu_stream(stream).handle()),
                 "gpu.not");
  }
};

BoolOp bool_op_of(const ir::Node& node) {
  return node.op_type() == "And" ? BoolOp::And : node.op_type() == "Or" ? BoolOp::Or : BoolOp::Xor;
}

std::string check_bool_binary(const ir::Node& node) {
  if (node.inputs().size() != 2) return "expected two inputs";
  for (size_t slot = 0; slot < 2; ++slot) {
    if (std::string why = check_bool_input(node, slot); !why.empty()) return why;
  }
  const auto da = static_dims(node.input(0));
  const auto db = static_dims(node.input(1));
  if (da && db) {
    std::vector<int64_t> out;
    if (!broadcast_dims({*da, *db}, out)) return "the inputs do not broadcast";
    if (out.size() > static_cast<size_t>(kernels::kMaxDims)) {
      return fmt::format("{} of rank {} (the GPU broadcasts up to rank {})", node.op_type(),
                         out.size(), kernels::kMaxDims);
    }
  }
  return check_single_output(node);
}

class BoolBinaryKernel final : public Kernel {
 public:
  explicit BoolBinaryKernel(const ir::Node& node) : op_(bool_op_of(node)) {}
  std::string_view name() const override { return "gpu.bool_binary"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    const auto* pa = static_cast<const bool*>(a.data);
    const auto* pb = static_cast<const bool*>(b.data);
    hipStream_t s = gpu_stream(stream).handle();
    if (a.dims == b.dims) {
      DeviceTensor y = outputs.allocate(0, DataType::Bool, a.dims);
      check_launch(kernels::launch_bool_binary(op_, pa, pb, static_cast<bool*>(y.data), a.numel(),
                                               nullptr, s),
                   "gpu.bool_binary");
      return;
    }
    std::vector<int64_t> dims;
    KILN_CHECK_ARG(broadcast_dims({a.dims, b.dims}, dims),
                   "gpu.bool_binary: {} and {} do not broadcast", dims_to_string(a.dims),
                   dims_to_string(b.dims));
    DeviceTensor y = outputs.allocate(0, DataType::Bool, dims);
    if (y.numel() == 0) return;
    const kernels::StridedShape shape =
        make_strided_shape(dims, {broadcast_strides(a.dims, dims), broadcast_strides(b.dims, dims)},
                           "gpu.bool_binary");
    check_launch(
        kernels::launch_bool_binary(op_, pa, pb, static_cast<bool*>(y.data), y.numel(), &shape, s),
        "gpu.bool_binary");
  }

 private:
  BoolOp op_;
};

// Not and the bool binaries read an element before writing the output element of its index, so
// the output may take an input's space (the planner offers only inputs of the output's shape).
// A float test's one-byte output never fits a float input's elements one to one: no in-place.
const bool kRegistered = [] {
  for (const char* op : {"IsNaN", "IsInf"}) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.op_type = op;
    def.name = "gpu.float_test";
    def.check = check_float_test;
    def.create = [](const ir::Node& n) -> std::unique_ptr<Kernel> {
      return std::make_unique<FloatTestKernel>(n);
    };
    KernelTable::instance().add(std::move(def));
  }
  {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.op_type = "Not";
    def.name = "gpu.not";
    def.in_place_inputs = {0};
    def.check = check_not;
    def.create = [](const ir::Node&) -> std::unique_ptr<Kernel> {
      return std::make_unique<NotKernel>();
    };
    KernelTable::instance().add(std::move(def));
  }
  for (const char* op : {"And", "Or", "Xor"}) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.op_type = op;
    def.name = "gpu.bool_binary";
    def.in_place_inputs = {0, 1};
    def.check = check_bool_binary;
    def.create = [](const ir::Node& n) -> std::unique_ptr<Kernel> {
      return std::make_unique<BoolBinaryKernel>(n);
    };
    KernelTable::instance().add(std::move(def));
  }
  return true;
}();

}  // namespace
}  // namespace kiln::backends::gpu
