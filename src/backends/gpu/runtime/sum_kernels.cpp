// Sum of two or more operands of one shape on the GPU (Caffe2-style residual sums): the first two
// added by the element-wise Add kernel, each further operand added into the result in place.
// Operands of one declared shape only, in any layout they share; a broadcasting Sum stays on the
// CPU (it says so). float32, float16, bfloat16.
#include <fmt/format.h>

#include <string>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::BinaryOp;

std::string check_sum(const ir::Node& node) {
  const size_t n = node.inputs().size();
  if (n < 2) return fmt::format("Sum of {} operand(s) (the GPU adds two or more)", n);
  for (size_t slot = 0; slot < n; ++slot) {
    if (std::string why = check_float_input(node, slot); !why.empty()) return why;
  }
  const TypeInfo& first = node.input(0)->type();
  for (size_t slot = 1; slot < n; ++slot) {
    const TypeInfo& t = node.input(slot)->type();
    if (t.dtype != first.dtype) return "Sum of operands of different types";
    if (!first.shape || !t.shape || *first.shape != *t.shape) {
      return fmt::format(
          "Sum of {} and {}: operands of one declared shape only on the GPU "
          "(a broadcast runs on the CPU)",
          first.to_string(), t.to_string());
    }
  }
  return "";
}

class SumKernel final : public Kernel {
 public:
  explicit SumKernel(const ir::Node& node) : dtype_(node.input(0)->type().dtype) {}
  std::string_view name() const override { return "gpu.sum"; }
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& a = in[0];
    for (const DeviceTensor& t : in) {
      KILN_CHECK_ARG(t.dtype == dtype_ && t.dims == a.dims && t.layout == a.layout,
                     "gpu.sum: operand {} {} does not match {} {}", dtype_name(t.dtype),
                     dims_to_string(t.dims), dtype_name(a.dtype), dims_to_string(a.dims));
    }
    DeviceTensor y = outputs.allocate(0, dtype_, a.dims);
    KILN_CHECK(y.layout == a.layout, ErrorCode::Internal, "gpu.sum: layouts {} -> {} differ",
               a.layout.to_string(), y.layout.to_string());
    const int64_t n = a.storage_numel();
    if (n == 0) return;
    hipStream_t s = gpu_stream(stream).handle();
    const kernels::FloatType type = *float_type(dtype_);
    check_launch(
        kernels::launch_binary(BinaryOp::Add, type, in[0].data, in[1].data, y.data, n, nullptr, s),
        name());
    for (size_t k = 2; k < in.size(); ++k) {
      check_launch(
          kernels::launch_binary(BinaryOp::Add, type, y.data, in[k].data, y.data, n, nullptr, s),
          name());
    }
  }

 private:
  DataType dtype_;
};

// The result may take operand 0's or 1's space (the first Add reads both at the index it
// writes); a later operand's would be overwritten before it is read.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Sum",
                      .name = "gpu.sum",
                      .in_place_inputs = {0, 1},
                      .check = check_sum,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<SumKernel>(node);
                      }});

}  // namespace
}  // namespace kiln::backends::gpu
