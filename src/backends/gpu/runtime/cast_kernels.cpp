// Cast on the GPU (cast.hip) among float32, float16, bfloat16, int32, int64 and bool.
#include <fmt/format.h>

#include <optional>

#include "backends/gpu/kernels/cast.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::CastType;

std::optional<CastType> cast_type(DataType t) {
  switch (t) {
    case DataType::Float32:
      return CastType::F32;
    case DataType::Float16:
      return CastType::F16;
    case DataType::BFloat16:
      return CastType::BF16;
    case DataType::Int32:
      return CastType::I32;
    case DataType::Int64:
      return CastType::I64;
    case DataType::Bool:
      return CastType::Bool;
    default:
      return std::nullopt;
  }
}

std::string check(const ir::Node& node) {
  const TypeInfo* x = tensor_type(node.input(0));
  const TypeInfo* y = tensor_type(node.output(0));
  if (!x || !y) return "Cast of a non-tensor";
  if (!cast_type(x->dtype) || !cast_type(y->dtype))
    return fmt::format(
        "Cast from {} to {}: the GPU casts among float32, float16, bfloat16, int32, int64 and "
        "bool",
        dtype_name(x->dtype), dtype_name(y->dtype));
  // Cast-19's saturate only concerns float8 targets, which are refused above.
  return "";
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const ir::Node& node) : to_(node.output(0)->type().dtype) {}
  std::string_view name() const override { return "gpu.cast"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const std::optional<CastType> from = cast_type(x.dtype);
    KILN_CHECK(from.has_value(), ErrorCode::Internal, "gpu.cast: input is {}", dtype_name(x.dtype));
    DeviceTensor y = outputs.allocate(0, to_, x.dims);
    check_launch(kernels::launch_cast(*from, *cast_type(to_), x.data, y.data, x.numel(),
                                      gpu_stream(stream).handle()),
                 name());
  }

 private:
  DataType to_;
};

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<CastKernel>(node);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Cast",
                      .name = "gpu.cast",
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
