// Gather on the GPU (data_movement.hip): any axis, int32 or int64 indices (negative ones count
// from the end), any data type of 1, 2, 4 or 8 bytes. Constant indices are range-checked here,
// so a bad model is refused with the reason; indices computed at run time cannot be checked
// without a device sync, and one out of range gives zeros.
#include <fmt/format.h>

#include "backends/gpu/kernels/data_movement.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

std::string check(const ir::Node& node) {
  if (std::string why = check_movable_input(node, 0); !why.empty()) return why;
  const TypeInfo* idx = tensor_type(node.input(1));
  if (!idx || (idx->dtype != DataType::Int32 && idx->dtype != DataType::Int64))
    return "Gather on the GPU takes int32 or int64 indices";
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank || *rank < 1) return "Gather on the GPU needs the data's rank";
  const int64_t axis = int_attr(node, "axis", 0);
  const std::optional<int64_t> a = normalized_axis(axis, *rank);
  if (!a) return fmt::format("Gather axis {} is outside rank {}", axis, *rank);
  // Constant indices against a static axis: refuse what the reference would reject.
  const std::optional<std::vector<int64_t>> data_dims = static_dims(node.input(0));
  const std::optional<std::vector<int64_t>> indices = constant_ints(node, 1);
  if (data_dims && indices) {
    const int64_t extent = (*data_dims)[size_t(*a)];
    for (int64_t k : *indices) {
      if (k < -extent || k >= extent)
        return fmt::format("Gather index {} is outside axis {} of extent {}", k, *a, extent);
    }
  }
  return "";
}

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const ir::Node& node) : axis_(int_attr(node, "axis", 0)) {}
  std::string_view name() const override { return "gpu.gather"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& data = in[0];
    const DeviceTensor& idx = in[1];
    const int64_t rank = static_cast<int64_t>(data.dims.size());
    const std::optional<int64_t> axis = normalized_axis(axis_, rank);
    KILN_CHECK_ARG(axis.has_value(), "gpu.gather: axis {} is outside {}", axis_,
                   dims_to_string(data.dims));
    KILN_CHECK(idx.dtype == DataType::Int32 || idx.dtype == DataType::Int64, ErrorCode::Internal,
               "gpu.gather: indices are {}", dtype_name(idx.dtype));
    const size_t a = static_cast<size_t>(*axis);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < a; ++d) outer *= data.dims[d];
    for (size_t d = a + 1; d < data.dims.size(); ++d) inner *= data.dims[d];
    std::vector<int64_t> dims(data.dims.begin(), data.dims.begin() + std::ptrdiff_t(a));
    dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
    dims.insert(dims.end(), data.dims.begin() + std::ptrdiff_t(a) + 1, data.dims.end());
    DeviceTensor y = outputs.allocate(0, data.dtype, dims);
    check_launch(kernels::launch_gather(movable_size(data.dtype), data.data, idx.data,
                                        idx.dtype == DataType::Int64, y.data, outer, data.dims[a],
                                        inner, idx.numel(), gpu_stream(stream).handle()),
                 name());
  }

 private:
  int64_t axis_;
};

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<GatherKernel>(node);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Gather",
                      .name = "gpu.gather",
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
