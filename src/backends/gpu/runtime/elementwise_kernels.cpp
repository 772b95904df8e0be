// The GPU backend's element-wise kernels (Relu, Neg, Abs, Add, Sub, Mul, Div; float32 and
// float16; inputs of one shape) as kernel-table entries under "gpu".
#include <fmt/format.h>

#include <string>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/kernel_table.hpp"
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
  // Element by element: any layout, as long as every operand shares it.
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> inputs, KernelOutputs& outputs, Stream& stream) override {
    KILN_CHECK(inputs.size() == static_cast<size_t>(op_.arity), ErrorCode::Internal,
               "{}: {} inputs, expected {}", op_.kernel, inputs.size(), op_.arity);
    for (const DeviceTensor& t : inputs) {
      KILN_CHECK(t.dtype == dtype_ && t.layout == inputs[0].layout, ErrorCode::Internal,
                 "{}: an input is {} ({}), the kernel was made for {} operands of one layout",
                 op_.kernel, dtype_name(t.dtype), t.layout.to_string(), dtype_name(dtype_));
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

// Empty when the element-wise kernel of `op` can run the node, else why not.
std::string check(const OpEntry& op, const ir::Node& node) {
  if (node.inputs().size() != static_cast<size_t>(op.arity) || node.outputs().size() != 1)
    return fmt::format("{} with {} inputs", node.op_type(), node.inputs().size());
  const TypeInfo& first = node.inputs()[0]->type();
  kernels::ElemType type;
  if (!first.is_tensor() || !elem_type(first.dtype, type))
    return fmt::format("{} on the GPU takes float32 or float16, not {}", node.op_type(),
                       first.to_string());
  if (op.arity == 2) {
    const TypeInfo& second = node.inputs()[1]->type();
    if (!second.is_tensor() || second.dtype != first.dtype)
      return fmt::format("{} of {} and {}", node.op_type(), first.to_string(), second.to_string());
    if (!first.shape || !second.shape || !(*first.shape == *second.shape))
      return fmt::format(
          "{} of {} and {}: broadcasting (or shapes not known equal) is not supported on the "
          "GPU yet",
          node.op_type(), first.to_string(), second.to_string());
  }
  return "";
}

// One table entry per op; each may overwrite any of its inputs (every element is read before
// the output element at its index is written).
const bool kRegistered = [] {
  for (const OpEntry& op : kOps) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.op_type = op.op_type;
    def.name = op.kernel;
    def.in_place_inputs = op.arity == 1 ? std::vector<size_t>{0} : std::vector<size_t>{0, 1};
    def.check = [op](const ir::Node& n) { return check(op, n); };
    def.create = [op](const ir::Node& n) -> std::unique_ptr<Kernel> {
      return std::make_unique<ElementwiseKernel>(op, n.inputs()[0]->type().dtype);
    };
    KernelTable::instance().add(std::move(def));
  }
  return true;
}();

}  // namespace

}  // namespace kiln::backends::gpu
