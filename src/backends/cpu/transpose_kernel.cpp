// Transpose on the CPU as a strided copy (strided_copy.hpp): output dim j walks the input with
// the stride of input dim perm[j]. Any element type but strings.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/strided_copy.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_transpose(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (!x || x->type().kind != TypeInfo::Kind::Tensor) return "input is not a tensor";
  if (x->type().dtype == DataType::String) return "string tensors";
  return "";
}

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.transpose"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const size_t rank = x.dims.size();
    ops::AttrReader attrs(node_);
    std::vector<int64_t> perm(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
    if (attrs.has_attr("perm")) perm = attrs.attr_ints("perm");
    std::vector<bool> seen(rank, false);
    attrs.check(perm.size() == rank, "perm has {} entries for rank {}", perm.size(), rank);
    for (int64_t p : perm) {
      attrs.check(p >= 0 && p < static_cast<int64_t>(rank) && !seen[p],
                  "perm is not a permutation of 0..{}", rank - 1);
      seen[p] = true;
    }
    const std::vector<int64_t> in_strides = ops::row_major_strides(x.dims);
    std::vector<int64_t> dims(rank);
    std::vector<StridedAxis> axes(rank);
    for (size_t j = 0; j < rank; ++j) {
      dims[j] = x.dims[perm[j]];
      axes[j] = {dims[j], in_strides[perm[j]]};
    }
    DeviceTensor y = out.allocate(0, x.dtype, dims);
    strided_copy(x.data, axes, dtype_size(x.dtype), y.data);
  }

 private:
  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_transpose(const ir::Node& node) {
  return std::make_unique<TransposeKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Transpose",
                      .name = "cpu.transpose",
                      .check = check_transpose,
                      .create = create_transpose});

}  // namespace kiln::backends::cpu
