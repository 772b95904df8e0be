// ReduceSum, ReduceMean, ReduceMax and ReduceMin on the GPU (reduce.hip): constant axes (the
// attribute, or from ReduceSum-13 / the others' opset 18 on a constant input), keepdims,
// noop_with_empty_axes; float32, float16 and bfloat16, accumulated in float32.
#include <fmt/format.h>

#include <algorithm>

#include "backends/gpu/kernels/reduce.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::ReduceOp;

struct ReduceEntry {
  const char* op_type;
  const char* kernel;
  ReduceOp op;
  int axes_input_opset;  // from this opset on, axes are input 1
};

constexpr ReduceEntry kReduce[] = {
    {"ReduceSum", "gpu.reduce_sum", ReduceOp::Sum, 13},
    {"ReduceMean", "gpu.reduce_mean", ReduceOp::Mean, 18},
    {"ReduceMax", "gpu.reduce_max", ReduceOp::Max, 18},
    {"ReduceMin", "gpu.reduce_min", ReduceOp::Min, 18},
};

// The node's axes (empty: none given); "" or why they are not known.
std::string axes_of(const ReduceEntry& e, const ir::Node& node, std::vector<int64_t>& axes) {
  if (node.opset() < e.axes_input_opset) {
    axes = ints_attr(node, "axes");
    return "";
  }
  if (node.inputs().size() < 2 || !node.input(1)) {
    axes.clear();
    return "";
  }
  std::optional<std::vector<int64_t>> v = constant_ints(node, 1);
  if (!v) return fmt::format("{} on the GPU needs constant axes", node.op_type());
  axes = std::move(*v);
  return "";
}

std::string check(const ReduceEntry& e, const ir::Node& node) {
  if (std::string why = check_float_input(node, 0); !why.empty()) return why;
  std::vector<int64_t> axes;
  if (std::string why = axes_of(e, node, axes); !why.empty()) return why;
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank) return fmt::format("{} on the GPU needs the input's rank", node.op_type());
  for (int64_t a : axes) {
    if (!normalized_axis(a, *rank))
      return fmt::format("{} axis {} is outside rank {}", node.op_type(), a, *rank);
  }
  return "";
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const ReduceEntry& e, const ir::Node& node)
      : e_(e),
        keepdims_(int_attr(node, "keepdims", 1) != 0),
        noop_(int_attr(node, "noop_with_empty_axes", 0) != 0),
        dtype_(node.input(0)->type().dtype) {
    axes_of(e, node, axes_);
  }
  std::string_view name() const override { return e_.kernel; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == dtype_, ErrorCode::Internal, "{}: input is {}, expected {}", e_.kernel,
               dtype_name(x.dtype), dtype_name(dtype_));
    const size_t rank = x.dims.size();
    std::vector<bool> reduced(rank, axes_.empty() && !noop_);
    for (int64_t a : axes_) {
      const std::optional<int64_t> axis = normalized_axis(a, static_cast<int64_t>(rank));
      KILN_CHECK_ARG(axis.has_value(), "{}: axis {} is outside {}", e_.kernel, a,
                     dims_to_string(x.dims));
      reduced[size_t(*axis)] = true;
    }
    const std::vector<int64_t> strides = row_major_strides(x.dims);
    std::vector<int64_t> out_dims, kept_dims, kept_strides, red_dims, red_strides;
    for (size_t d = 0; d < rank; ++d) {
      if (reduced[d]) {
        red_dims.push_back(x.dims[d]);
        red_strides.push_back(strides[d]);
        if (keepdims_) out_dims.push_back(1);
      } else {
        kept_dims.push_back(x.dims[d]);
        kept_strides.push_back(strides[d]);
        out_dims.push_back(x.dims[d]);
      }
    }
    DeviceTensor y = outputs.allocate(0, dtype_, out_dims);
    if (y.numel() == 0) return;
    const kernels::StridedShape kept = make_strided_shape(kept_dims, {kept_strides}, e_.kernel);
    const kernels::StridedShape red = make_strided_shape(red_dims, {red_strides}, e_.kernel);
    check_launch(kernels::launch_reduce(e_.op, *float_type(dtype_), x.data, y.data, y.numel(), kept,
                                        shape_numel(red_dims), red, gpu_stream(stream).handle()),
                 e_.kernel);
  }

 private:
  ReduceEntry e_;
  bool keepdims_;
  bool noop_;
  DataType dtype_;
  std::vector<int64_t> axes_;
};

const bool kRegistered = [] {
  for (const ReduceEntry& e : kReduce) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.op_type = e.op_type;
    def.name = e.kernel;
    def.check = [e](const ir::Node& n) { return check(e, n); };
    def.create = [e](const ir::Node& n) -> std::unique_ptr<Kernel> {
      return std::make_unique<ReduceKernel>(e, n);
    };
    KernelTable::instance().add(std::move(def));
  }
  return true;
}();

}  // namespace
}  // namespace kiln::backends::gpu
