// Gather and GatherElements on the CPU. Gather: the output seen as [outer, indices, inner] rows
// of the data's dims after the axis, each row one memcpy from the row the index names.
// GatherElements: the output has the indices' dims; each element is the data's element at its
// own coordinates with the axis one replaced by its index, walked row by row with the data's
// offset of each row kept by an odometer. Indices are checked (and negative ones wrapped)
// before anything is copied, as the reference does; an empty output reads none. Any element
// type but strings.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/element_bits.hpp"
#include "backends/cpu/movement_inputs.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_gather(const ir::Node& node) {
  if (node.inputs().size() != 2 || !node.input(0) || !node.input(1)) return "not two inputs";
  return check_data_input(node);
}

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.gather"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const DeviceTensor& indices = in[1];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    ops::AttrReader attrs(node_);
    attrs.check(rank >= 1, "data must have rank >= 1");
    const size_t ax =
        static_cast<size_t>(ops::normalize_axis(attrs, attrs.attr_int("axis", 0), rank));
    std::vector<int64_t> dims(x.dims.begin(), x.dims.begin() + static_cast<std::ptrdiff_t>(ax));
    dims.insert(dims.end(), indices.dims.begin(), indices.dims.end());
    dims.insert(dims.end(), x.dims.begin() + static_cast<std::ptrdiff_t>(ax) + 1, x.dims.end());
    DeviceTensor y = out.allocate(0, x.dtype, dims);
    if (y.numel() == 0) return;
    const int64_t dim = x.dims[ax];
    const std::vector<int64_t> idx = checked_indices(attrs, indices, dim);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < ax; ++d) outer *= x.dims[d];
    for (size_t d = ax + 1; d < x.dims.size(); ++d) inner *= x.dims[d];
    const int64_t n = static_cast<int64_t>(idx.size());
    const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype);
    const auto* src = static_cast<const char*>(x.data);
    auto* dst = static_cast<char*>(y.data);
    const int64_t rows = outer * n;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * inner > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r / n, j = r % n;
      std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                  src + static_cast<size_t>(o * dim + idx[static_cast<size_t>(j)]) * row_bytes,
                  row_bytes);
    }
  }

 private:
  const ir::Node& node_;
};

// One row of GatherElements: element i at base[i * inner_stride + idx[i] * axis_stride]
// (inner_stride 0 when the axis is the innermost dim, whose coordinate the index replaces).
template <typename T>
void gather_row(const T* base, const int64_t* idx, int64_t n, int64_t inner_stride,
                int64_t axis_stride, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = base[i * inner_stride + idx[i] * axis_stride];
}

class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.gather_elements"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const DeviceTensor& indices = in[1];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    ops::AttrReader attrs(node_);
    attrs.check(rank >= 1, "data must have rank >= 1");
    const size_t ax = static_cast<size_t>(
                     ops::normalize_axis(attrs, attrs.attr_int("axis", 0), rank)),
                 r = x.dims.size();
    attrs.check(indices.dims.size() == r, "indices have rank {}, data has {}", indices.dims.size(),
                r);
    for (size_t i = 0; i < r; ++i) {
      attrs.check(i == ax || indices.dims[i] <= x.dims[i],
                  "indices shape {} exceeds data shape {} on axis {}", dims_to_string(indices.dims),
                  dims_to_string(x.dims), i);
    }
    DeviceTensor y = out.allocate(0, x.dtype, indices.dims);
    if (y.numel() == 0) return;
    const int64_t dim = x.dims[ax];
    const std::vector<int64_t> idx = checked_indices(attrs, indices, dim);
    const std::vector<int64_t> strides = ops::row_major_strides(x.dims);
    const int64_t inner = indices.dims[r - 1];
    const int64_t rows = y.numel() / inner;
    const size_t esize = dtype_size(x.dtype);
    const int64_t inner_stride = ax == r - 1 ? 0 : strides[r - 1];
    std::vector<int64_t> index(r, 0);
    int64_t base = 0;  // the data's offset of the row's first element, the axis coordinate 0
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t* row_idx = idx.data() + row * inner;
      const int64_t o = row * inner;
      with_element_bits(esize, [&](auto tag) {
        using T = decltype(tag);
        gather_row(static_cast<const T*>(x.data) + base, row_idx, inner, inner_stride, strides[ax],
                   static_cast<T*>(y.data) + o);
      });
      // The next row: the odometer over the indices' outer dims (the axis contributes through
      // the indices only).
      for (size_t k = r - 1; k-- > 0;) {
        if (k != ax) base += strides[k];
        if (++index[k] < indices.dims[k]) break;
        if (k != ax) base -= indices.dims[k] * strides[k];
        index[k] = 0;
      }
    }
  }

 private:
  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_gather_elements(const ir::Node& node) {
  return std::make_unique<GatherElementsKernel>(node);
}

std::unique_ptr<Kernel> create_gather(const ir::Node& node) {
  return std::make_unique<GatherKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Gather",
                      .name = "cpu.gather",
                      .check = check_gather,
                      .create = create_gather});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "GatherElements",
                      .name = "cpu.gather_elements",
                      .check = check_gather,
                      .create = create_gather_elements});

}  // namespace kiln::backends::cpu
