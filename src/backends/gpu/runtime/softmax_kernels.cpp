// Softmax and LogSoftmax on the GPU (softmax.hip): any axis; opset 13 semantics (along one
// axis) and, before opset 13, the input flattened to 2-D at the axis. float32, float16 and
// bfloat16, computed in float32.
#include <fmt/format.h>

#include "backends/gpu/kernels/softmax.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

int64_t default_axis(const ir::Node& node) {
  return node.opset() >= 13 ? -1 : 1;
}

std::string check(const ir::Node& node) {
  if (std::string why = check_float_input(node, 0); !why.empty()) return why;
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank) return fmt::format("{} on the GPU needs the input's rank", node.op_type());
  const int64_t axis = int_attr(node, "axis", default_axis(node));
  if (!normalized_axis(axis, *rank))
    return fmt::format("{} axis {} is outside rank {}", node.op_type(), axis, *rank);
  return "";
}

class SoftmaxKernel final : public Kernel {
 public:
  explicit SoftmaxKernel(const ir::Node& node)
      : log_(node.op_type() == "LogSoftmax"),
        flatten_(node.opset() < 13),
        axis_(int_attr(node, "axis", default_axis(node))),
        dtype_(node.input(0)->type().dtype) {}
  std::string_view name() const override { return log_ ? "gpu.log_softmax" : "gpu.softmax"; }

  void run(std::span<const DeviceTensor> inputs, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = inputs[0];
    KILN_CHECK(x.dtype == dtype_, ErrorCode::Internal, "{}: input is {}, expected {}", name(),
               dtype_name(x.dtype), dtype_name(dtype_));
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    const std::optional<int64_t> axis = normalized_axis(axis_, rank);
    KILN_CHECK_ARG(axis.has_value(), "{}: axis {} is outside the input {}", name(), axis_,
                   dims_to_string(x.dims));
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t e = x.dims[static_cast<size_t>(d)];
      if (d < *axis) {
        outer *= e;
      } else if (d == *axis || flatten_) {
        n *= e;
      } else {
        inner *= e;
      }
    }
    DeviceTensor y = outputs.allocate(0, dtype_, x.dims);
    check_launch(kernels::launch_softmax(*float_type(dtype_), x.data, y.data, outer, n, inner, log_,
                                         gpu_stream(stream).handle()),
                 name());
  }

 private:
  bool log_;
  bool flatten_;
  int64_t axis_;
  DataType dtype_;
};

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<SoftmaxKernel>(node);
}

// Each row is read whole before any of it is written (softmax.hip), so output 0 may take the
// input's space.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Softmax",
                      .name = "gpu.softmax",
                      .in_place_inputs = {0},
                      .check = check,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "LogSoftmax",
                      .name = "gpu.log_softmax",
                      .in_place_inputs = {0},
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
