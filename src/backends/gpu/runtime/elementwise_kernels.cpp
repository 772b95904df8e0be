#include "backends/gpu/runtime/elementwise_kernels.hpp"

#include <fmt/format.h>

#include <string>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "core/dtype.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

struct OpEntry {
  const char* op_type;
  const char* kernel;
  int arity;
  kernels::UnaryOp unary;
  kernels::BinaryOp binary;
};

constexpr OpEntry kOps[] = {
    {"Relu", "gpu.relu", 1, kernels::UnaryOp::Relu, {}},
    {"Neg", "gpu.neg", 1, kernels::UnaryOp::Neg, {}},
    {"Abs", "gpu.abs", 1, kernels::UnaryOp::Abs, {}},
    {"Add", "gpu.add", 2, {}, kernels::BinaryOp::Add},
    {"Sub", "gpu.sub", 2, {}, kernels::BinaryOp::Sub},
    {"Mul", "gpu.mul", 2, {}, kernels::BinaryOp::Mul},
    {"Div", "gpu.div", 2, {}, kernels::BinaryOp::Div},
};

const OpEntry* find_op(const ir::Node& node) {
  if (!node.domain().empty()) return nullptr;
  for (const OpEntry& e : kOps) {
    if (node.op_type() == e.op_type) return &e;
  }
  return nullptr;
}

bool elem_type(DataType t, kernels::ElemType& out) {
  if (t == DataType::Float32)
    out = kernels::ElemType::F32;
  else if (t == DataType::Float16)
    out = kernels::ElemType::F16;
  else
    return false;
  return true;
}

class ElementwiseKernel final : public Kernel {
 public:
  ElementwiseKernel(const OpEntry& op, DataType dtype) : op_(op), dtype_(dtype) {
    elem_type(dtype, type_);
  }
  std::string_view name() const override { return op_.kernel; }

  void run(std::span<const DeviceTensor> inputs, KernelOutputs& outputs, Stream& stream) override {
    KILN_CHECK(inputs.size() == static_cast<size_t>(op_.arity), ErrorCode::Internal,
               "{}: {} inputs, expected {}", op_.kernel, inputs.size(), op_.arity);
    for (const DeviceTensor& t : inputs) {
      KILN_CHECK(t.dtype == dtype_ && t.layout.is_row_major(), ErrorCode::Internal,
                 "{}: an input is {} ({}), the kernel was made for row-major {}", op_.kernel,
                 dtype_name(t.dtype), t.layout.to_string(), dtype_name(dtype_));
    }
    // Shapes were equal as declared; a symbolic dim bound differently per input would be a
    // broadcast, which this kernel does not do.
    if (op_.arity == 2) {
      KILN_CHECK(inputs[0].dims == inputs[1].dims, ErrorCode::Unsupported,
                 "{}: inputs {} and {} differ; broadcasting is not supported on the GPU yet",
                 op_.kernel, dims_to_string(inputs[0].dims), dims_to_string(inputs[1].dims));
    }
    DeviceTensor y = outputs.allocate(0, dtype_, inputs[0].dims);
    hipStream_t s = gpu_stream(stream).handle();
    hipError_t status =
        op_.arity == 1
            ? kernels::launch_unary(op_.unary, type_, inputs[0].data, y.data, y.numel(), s)
            : kernels::launch_binary(op_.binary, type_, inputs[0].data, inputs[1].data, y.data,
                                     y.numel(), s);
    if (status != hipSuccess) runtime_fail(status, op_.kernel);
  }

 private:
  OpEntry op_;
  DataType dtype_;
  kernels::ElemType type_ = kernels::ElemType::F32;
};

}  // namespace

Support elementwise_support(const ir::Node& node) {
  const OpEntry* op = find_op(node);
  if (!op) return Support::no(fmt::format("no GPU kernel for {}", node.op_type()));
  if (node.inputs().size() != static_cast<size_t>(op->arity) || node.outputs().size() != 1)
    return Support::no(fmt::format("{} with {} inputs", node.op_type(), node.inputs().size()));
  const TypeInfo& first = node.inputs()[0]->type();
  kernels::ElemType type;
  if (!first.is_tensor() || !elem_type(first.dtype, type))
    return Support::no(fmt::format("{} on the GPU takes float32 or float16, not {}", node.op_type(),
                                   first.to_string()));
  if (op->arity == 2) {
    const TypeInfo& second = node.inputs()[1]->type();
    if (!second.is_tensor() || second.dtype != first.dtype)
      return Support::no(
          fmt::format("{} of {} and {}", node.op_type(), first.to_string(), second.to_string()));
    if (!first.shape || !second.shape || !(*first.shape == *second.shape))
      return Support::no(fmt::format(
          "{} of {} and {}: broadcasting (or shapes not known equal) is not supported on the "
          "GPU yet",
          node.op_type(), first.to_string(), second.to_string()));
  }
  return Support::yes(op->kernel);
}

std::vector<size_t> elementwise_in_place_inputs(const ir::Node& node,
                                                std::string_view kernel_name) {
  const OpEntry* op = find_op(node);
  if (!op || kernel_name != op->kernel) return {};
  if (op->arity == 1) return {0};
  return {0, 1};
}

std::unique_ptr<Kernel> create_elementwise_kernel(const ir::Node& node,
                                                  std::string_view kernel_name) {
  const OpEntry* op = find_op(node);
  if (!op || kernel_name != op->kernel) return nullptr;
  Support s = elementwise_support(node);
  KILN_CHECK(s.ok(), ErrorCode::Unsupported, "{} cannot run node {}: {}", kernel_name, node.name(),
             s.reason);
  return std::make_unique<ElementwiseKernel>(*op, node.inputs()[0]->type().dtype);
}

}  // namespace kiln::backends::gpu
