// Where on the GPU (data_movement.hip): bool condition, X and Y of one element type of 1, 2, 4
// or 8 bytes, all three broadcast numpy-style (rank <= 8).
#include <fmt/format.h>

#include "backends/gpu/kernels/data_movement.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

std::string check(const ir::Node& node) {
  if (node.inputs().size() != 3) return "Where with other than three inputs";
  const TypeInfo* c = tensor_type(node.input(0));
  if (!c || c->dtype != DataType::Bool) return "Where's condition must be a bool tensor";
  for (size_t k = 1; k < 3; ++k) {
    if (std::string why = check_movable_input(node, k); !why.empty()) return why;
  }
  if (node.input(1)->type().dtype != node.input(2)->type().dtype) return "Where of mixed types";
  const auto d0 = static_dims(node.input(0));
  const auto d1 = static_dims(node.input(1));
  const auto d2 = static_dims(node.input(2));
  if (d0 && d1 && d2) {
    std::vector<int64_t> out;
    if (!broadcast_dims({*d0, *d1, *d2}, out)) return "Where's operands do not broadcast";
    if (out.size() > static_cast<size_t>(kernels::kMaxDims))
      return fmt::format("Where of rank {} (the GPU broadcasts up to rank {})", out.size(),
                         kernels::kMaxDims);
  }
  return "";
}

class WhereKernel final : public Kernel {
 public:
  std::string_view name() const override { return "gpu.where"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& c = in[0];
    const DeviceTensor& x = in[1];
    const DeviceTensor& y = in[2];
    KILN_CHECK(c.dtype == DataType::Bool && x.dtype == y.dtype, ErrorCode::Internal,
               "gpu.where: operands {}, {}, {}", dtype_name(c.dtype), dtype_name(x.dtype),
               dtype_name(y.dtype));
    std::vector<int64_t> dims;
    KILN_CHECK_ARG(broadcast_dims({c.dims, x.dims, y.dims}, dims),
                   "gpu.where: {}, {} and {} do not broadcast", dims_to_string(c.dims),
                   dims_to_string(x.dims), dims_to_string(y.dims));
    DeviceTensor out = outputs.allocate(0, x.dtype, dims);
    if (out.numel() == 0) return;
    const kernels::StridedShape shape =
        make_strided_shape(dims,
                           {broadcast_strides(c.dims, dims), broadcast_strides(x.dims, dims),
                            broadcast_strides(y.dims, dims)},
                           "gpu.where");
    check_launch(kernels::launch_where(movable_size(x.dtype), c.data, x.data, y.data, out.data,
                                       out.numel(), shape, gpu_stream(stream).handle()),
                 name());
  }
};

std::unique_ptr<Kernel> create(const ir::Node&) {
  return std::make_unique<WhereKernel>();
}

// X or Y of the output's shape is read at the output's own index only, before it is written.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Where",
                      .name = "gpu.where",
                      .in_place_inputs = {1, 2},
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
