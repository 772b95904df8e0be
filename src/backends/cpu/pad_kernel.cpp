// Pad on the CPU (constant, reflect, edge, wrap; negative pads crop): the output row by row
// along its innermost dim. A row whose outer coordinates fall in a constant pad is the fill;
// otherwise the row reads the input row its coordinates map to (ops/pad_rules.hpp, the
// reference's rules), its kept middle one memcpy and each padded end element mapped on its own.
// Rows are split over the threads. Any element type but strings from opset 11 (the fill is the
// constant_value input, else zero); float32 before it (the fill is the `value` attribute).
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/movement_inputs.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"
#include "ops/pad_rules.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_pad(const ir::Node& node) {
  if (std::string why = check_data_input(node); !why.empty()) return why;
  if (node.opset() < 11 && node.input(0)->type().dtype != DataType::Float32) {
    return "Pad before opset 11 on other types than float32 (the reference takes them)";
  }
  return "";
}

class PadKernel final : public Kernel {
 public:
  explicit PadKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.pad"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    ops::AttrReader attrs(node_);
    const size_t esize = dtype_size(x.dtype);
    std::vector<int64_t> pads, axes;
    std::vector<unsigned char> fill(esize, 0);
    if (attrs.opset() < 11) {
      pads = attrs.attr_ints(attrs.opset() < 2 ? "paddings" : "pads");
      axes = ops::all_axes(rank);
      const float value = attrs.attr_float("value", 0.f);
      std::memcpy(fill.data(), &value, sizeof value);
    } else {
      attrs.check(given(in, 1) && in[1].dims.size() <= 1, "pads must be a 1-D tensor");
      pads = index_values(attrs, in[1], "pads");
      axes = given(in, 3) ? index_values(attrs, in[3], "axes") : ops::all_axes(rank);
      if (given(in, 2)) {
        const DeviceTensor& v = in[2];
        attrs.check(v.dtype == x.dtype, "constant_value has type {}, data has {}",
                    dtype_name(v.dtype), dtype_name(x.dtype));
        attrs.check(v.numel() <= 1, "constant_value must be a scalar, got {}",
                    dims_to_string(v.dims));
        if (v.numel() == 1) std::memcpy(fill.data(), v.data, esize);
      }
    }
    const ops::PadMode mode = ops::pad_mode(attrs);
    const ops::PadPlan plan =
        ops::plan_pad(attrs, x.dims, ops::expand_pads(attrs, pads, axes, rank), mode, pads);
    DeviceTensor y = out.allocate(0, x.dtype, plan.out_dims);
    const int64_t total = y.numel();
    if (total == 0) return;
    const auto* src = static_cast<const char*>(x.data);
    auto* dst = static_cast<char*>(y.data);
    if (rank == 0) {
      std::memcpy(dst, src, esize);
      return;
    }
    const std::vector<int64_t> strides = ops::row_major_strides(x.dims);
    const size_t last = static_cast<size_t>(rank - 1);
    const int64_t width = plan.out_dims[last], before = plan.before[last], kept = plan.len[last],
                  lo = plan.lo[last];
    const int64_t rows = total / width;
    auto put_fill = [&](char* at, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(at + i * static_cast<int64_t>(esize), fill.data(), esize);
    };
#pragma omp parallel for schedule(static) if (rows > 1 && total > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      char* row = dst + static_cast<size_t>(r * width) * esize;
      // The input row this output row reads: each outer coordinate mapped back.
      int64_t offset = 0;
      bool constant_row = false;
      for (size_t k = last, rest = static_cast<size_t>(r); k-- > 0;) {
        const int64_t i = static_cast<int64_t>(rest % static_cast<size_t>(plan.out_dims[k]));
        rest /= static_cast<size_t>(plan.out_dims[k]);
        const int64_t s = ops::pad_source(mode, i - plan.before[k], plan.len[k]);
        if (s < 0) {
          constant_row = true;
          break;
        }
        offset += (plan.lo[k] + s) * strides[k];
      }
      if (constant_row) {
        put_fill(row, width);
        continue;
      }
      const char* in_row = src + offset * static_cast<int64_t>(esize);
      auto element = [&](int64_t j) {
        const int64_t s = ops::pad_source(mode, j - before, kept);
        char* at = row + j * static_cast<int64_t>(esize);
        if (s < 0) {
          std::memcpy(at, fill.data(), esize);
        } else {
          std::memcpy(at, in_row + (lo + s) * static_cast<int64_t>(esize), esize);
        }
      };
      for (int64_t j = 0; j < std::min(before, width); ++j) element(j);
      if (kept > 0) {
        std::memcpy(row + before * static_cast<int64_t>(esize),
                    in_row + lo * static_cast<int64_t>(esize), static_cast<size_t>(kept) * esize);
      }
      for (int64_t j = before + kept; j < width; ++j) element(j);
    }
  }

 private:
  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_pad(const ir::Node& node) {
  return std::make_unique<PadKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Pad",
                      .name = "cpu.pad",
                      .check = check_pad,
                      .create = create_pad});

}  // namespace kiln::backends::cpu
