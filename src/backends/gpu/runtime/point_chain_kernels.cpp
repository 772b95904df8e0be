// ai.kiln PointChain on the GPU (kernels/point_chain.hip): float32, float16 and bfloat16, up to
// eight steps and four inputs of rank <= 8. Inputs of the output's shape go element by element in
// any layout they share; an operand that broadcasts walks row-major dims.
#include <fmt/format.h>

#include "backends/gpu/kernels/point_chain.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/point_chain_nodes.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kName = "gpu.point_chain";

std::string check(const ir::Node& node) {
  try {
    (void)ops::read_point_chain(ops::AttrReader(node));
  } catch (const Error& e) {
    return e.message();
  }
  if (node.inputs().empty() || node.inputs().size() > size_t(point::kMaxPointInputs))
    return fmt::format("PointChain with {} inputs", node.inputs().size());
  for (size_t k = 0; k < node.inputs().size(); ++k) {
    if (std::string why = check_float_input(node, k); !why.empty()) return why;
    if (node.input(k)->type().dtype != node.input(0)->type().dtype)
      return "PointChain of mixed element types";
    const std::optional<int64_t> rank = known_rank(node.input(k));
    if (!rank || *rank > kernels::kMaxDims)
      return fmt::format("PointChain input {} of unknown rank or above {}", k, kernels::kMaxDims);
  }
  return "";
}

class PointChainKernel final : public Kernel {
 public:
  explicit PointChainKernel(const ir::Node& node)
      : dtype_(node.input(0)->type().dtype), uniform_(same_declared_shapes(node)) {
    const std::vector<point::PointStep> steps = ops::read_point_chain(ops::AttrReader(node));
    program_.steps = static_cast<int>(steps.size());
    for (size_t k = 0; k < steps.size(); ++k) program_.step[k] = steps[k];
    program_.inputs = static_cast<int>(node.inputs().size());
  }
  std::string_view name() const override { return kName; }
  BlockedLayouts blocked_layouts() const override {
    return uniform_ ? BlockedLayouts{.uniform = true} : BlockedLayouts{};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    kernels::PointProgram p = program_;
    bool same = true;
    for (size_t k = 0; k < in.size(); ++k) {
      KILN_CHECK(in[k].dtype == dtype_, ErrorCode::Internal, "{}: input {} is {}, not {}", kName, k,
                 dtype_name(in[k].dtype), dtype_name(dtype_));
      p.input[k] = in[k].data;
      same = same && in[k].dims == x.dims && in[k].layout == x.layout;
    }
    DeviceTensor y = outputs.allocate(0, dtype_, x.dims);
    if (y.numel() == 0) return;
    const hipStream_t s = gpu_stream(stream).handle();
    const kernels::FloatType type = *float_type(dtype_);
    if (same && y.layout == x.layout) {
      check_launch(kernels::launch_point_chain(type, p, y.data, x.storage_numel(), nullptr, s),
                   kName);
      return;
    }
    std::vector<std::vector<int64_t>> strides;
    for (size_t k = 0; k < in.size(); ++k) {
      KILN_CHECK(in[k].layout.kind == Layout::Kind::RowMajor, ErrorCode::Internal,
                 "{}: a broadcast needs row-major inputs", kName);
      std::vector<int64_t> joint;
      KILN_CHECK_ARG(broadcast_dims({in[k].dims, x.dims}, joint) && joint == x.dims,
                     "{}: input {} {} does not broadcast into {}", kName, k,
                     dims_to_string(in[k].dims), dims_to_string(x.dims));
      strides.push_back(broadcast_strides(in[k].dims, x.dims));
    }
    KILN_CHECK(y.layout.kind == Layout::Kind::RowMajor, ErrorCode::Internal,
               "{}: a broadcast writes row-major", kName);
    const kernels::StridedShape shape = make_strided_shape(x.dims, strides, kName);
    check_launch(kernels::launch_point_chain(type, p, y.data, y.numel(), &shape, s), kName);
  }

 private:
  kernels::PointProgram program_;
  DataType dtype_;
  bool uniform_;
};

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<PointChainKernel>(node);
}

// Each element of input 0 is read before the output element of its index is written.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "PointChain",
                      .name = kName,
                      .in_place_inputs = {0},
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
