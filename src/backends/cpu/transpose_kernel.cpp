// Transpose on the CPU as a strided copy: output dims of size 1 dropped, output dims that are
// also consecutive in the input merged, then, when the innermost dim is contiguous in the input
// too, one memcpy per row; otherwise a gather along it with the input's stride. Rows are split
// over the threads. Any element type but strings.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
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

// One output dim as the copy walks it: its size and its stride in the input (in elements).
struct Axis {
  int64_t size, in_stride;
};

template <typename T>
void gather_row(const T* src, int64_t n, int64_t stride, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
}

void strided_row(const char* src, int64_t n, int64_t stride, size_t esize, char* dst) {
  switch (esize) {
    case 1:
      return gather_row(reinterpret_cast<const uint8_t*>(src), n, stride,
                        reinterpret_cast<uint8_t*>(dst));
    case 2:
      return gather_row(reinterpret_cast<const uint16_t*>(src), n, stride,
                        reinterpret_cast<uint16_t*>(dst));
    case 4:
      return gather_row(reinterpret_cast<const uint32_t*>(src), n, stride,
                        reinterpret_cast<uint32_t*>(dst));
    case 8:
      return gather_row(reinterpret_cast<const uint64_t*>(src), n, stride,
                        reinterpret_cast<uint64_t*>(dst));
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * esize, src + i * stride * esize, esize);
  }
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
    std::vector<Axis> axes;
    for (size_t j = 0; j < rank; ++j) {
      dims[j] = x.dims[perm[j]];
      if (dims[j] == 1) continue;
      Axis a{dims[j], in_strides[perm[j]]};
      if (!axes.empty() && axes.back().in_stride == a.size * a.in_stride) {
        axes.back() = {axes.back().size * a.size, a.in_stride};  // consecutive in the input too
      } else {
        axes.push_back(a);
      }
    }
    DeviceTensor y = out.allocate(0, x.dtype, dims);
    const int64_t total = shape_numel(dims);
    if (total == 0) return;
    const size_t esize = dtype_size(x.dtype);
    const auto* px = static_cast<const char*>(x.data);
    auto* py = static_cast<char*>(y.data);
    if (axes.empty()) axes.push_back({1, 1});
    const Axis last = axes.back();
    axes.pop_back();
    const int64_t rows = total / last.size;
    const bool contiguous = last.in_stride == 1;
    // Tasks of whole rows, about 16k elements each; a task finds its first row's offset by
    // division, then steps like an odometer.
    const int64_t chunk = std::max<int64_t>(1, 16384 / last.size);
    const int64_t tasks = (rows + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (tasks > 1 && total > 32768)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t r0 = task * chunk, r1 = std::min(rows, r0 + chunk);
      std::vector<int64_t> index(axes.size());
      int64_t offset = 0;
      for (size_t k = axes.size(), rest = r0; k-- > 0;) {
        index[k] = static_cast<int64_t>(rest) % axes[k].size;
        rest /= axes[k].size;
        offset += index[k] * axes[k].in_stride;
      }
      for (int64_t r = r0; r < r1; ++r) {
        char* dst = py + static_cast<size_t>(r * last.size) * esize;
        const char* src = px + static_cast<size_t>(offset) * esize;
        if (contiguous) {
          std::memcpy(dst, src, static_cast<size_t>(last.size) * esize);
        } else {
          strided_row(src, last.size, last.in_stride, esize, dst);
        }
        for (size_t k = axes.size(); k-- > 0;) {
          offset += axes[k].in_stride;
          if (++index[k] < axes[k].size) break;
          offset -= axes[k].size * axes[k].in_stride;
          index[k] = 0;
        }
      }
    }
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
