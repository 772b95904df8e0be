// Split on the CPU: each output a strided copy (strided_copy.hpp) of its part of the axis. The
// sizes as the reference takes them (given as an attribute before opset 13, an input after;
// else equal parts, ops/split_sizes.hpp). Any element type but strings.
#include <algorithm>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/movement_inputs.hpp"
#include "backends/cpu/strided_copy.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"
#include "ops/split_sizes.hpp"

namespace kiln::backends::cpu {
namespace {

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.split"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    ops::AttrReader attrs(node_);
    attrs.check(rank >= 1, "input must have rank >= 1");
    const size_t ax =
        static_cast<size_t>(ops::normalize_axis(attrs, attrs.attr_int("axis", 0), rank));
    const int64_t dim = x.dims[ax];
    const size_t outputs = node_.outputs().size();
    std::vector<int64_t> sizes;
    const bool sizes_input = (attrs.opset() >= 13 || attrs.opset() < 2) && given(in, 1);
    if (attrs.opset() < 13 && attrs.has_attr("split")) {
      sizes = attrs.attr_ints("split");
    } else if (sizes_input) {
      sizes = index_values(attrs, in[1], "split");
    }
    if (!sizes.empty() || sizes_input) {
      ops::check_split_sizes(attrs, sizes, outputs, ax, dim);
    } else {
      sizes = ops::split_equal(attrs, dim, ops::split_part_count(attrs, outputs));
    }
    const std::vector<int64_t> strides = ops::row_major_strides(x.dims);
    const size_t esize = dtype_size(x.dtype);
    int64_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<int64_t> dims = x.dims;
      dims[ax] = sizes[k];
      if (node_.output(k) != nullptr) {
        DeviceTensor y = out.allocate(k, x.dtype, dims);
        std::vector<StridedAxis> walk(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) walk[d] = {dims[d], strides[d]};
        if (y.numel() > 0) {
          strided_copy(
              static_cast<const char*>(x.data) + offset * strides[ax] * static_cast<int64_t>(esize),
              walk, esize, y.data);
        }
      }
      offset += sizes[k];
    }
  }

 private:
  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_split(const ir::Node& node) {
  return std::make_unique<SplitKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Split",
                      .name = "cpu.split",
                      .check = check_data_input,
                      .create = create_split});

}  // namespace kiln::backends::cpu
