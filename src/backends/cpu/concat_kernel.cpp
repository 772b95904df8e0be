// Concat on the CPU: one copy per input and index before the axis (each input's part of a row
// is contiguous in row-major order). A 4-D float tensor concatenated along channels may also be
// channel-blocked when every input's channel count is a multiple of 16: then no input carries
// padding lanes, each sample of an input is (C/b) whole blocks of H*W*b floats, and the copies
// are the same as for row-major data with C*H*W floats per sample. 8-bit images along channels
// may be channels-last (the int8 convolutions' layout): each pixel's channels are one row.
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {
namespace {

// Channel counts that are whole blocks whichever block the CPU uses (16 with AVX-512, else 8).
constexpr int64_t kWholeBlocks = 16;

std::string check_concat(const ir::Node& node) {
  if (node.inputs().empty() || node.outputs().size() != 1) return "not one output of inputs";
  for (const ir::Value* v : node.inputs()) {
    if (!v) return "a missing input";
    if (v->type().kind != TypeInfo::Kind::Tensor) return "an input that is not a tensor";
    if (v->type().dtype == DataType::String) return "string tensors";
    if (v->type().dtype != node.input(0)->type().dtype) return "inputs of different types";
  }
  if (!ops::AttrReader(node).has_attr("axis")) return "no axis";
  return "";
}

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const ir::Node& node)
      : node_(node), axis_(ops::AttrReader(node).attr_int("axis", 0)) {}
  std::string_view name() const override { return "cpu.concat"; }

  BlockedLayouts blocked_layouts() const override {
    if (channels_of_8bit_images()) return {.uniform = true, .layout = Layout::channels_last()};
    for (size_t i = 0; i < node_.inputs().size(); ++i) {
      auto d = declared_dims(node_, i);
      if (node_.input(i)->type().dtype != DataType::Float32 || !d || d->size() != 4 ||
          (axis_ != 1 && axis_ != -3) || (*d)[1] < 0 || (*d)[1] % kWholeBlocks != 0) {
        return {};
      }
    }
    return {.uniform = true};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& first = in[0];
    const int64_t rank = static_cast<int64_t>(first.dims.size());
    ops::AttrReader attrs(node_);
    attrs.check(rank >= 1 && axis_ >= -rank && axis_ < rank, "axis {} is out of range for rank {}",
                axis_, rank);
    const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
    std::vector<int64_t> dims = first.dims;
    dims[axis] = 0;
    for (const DeviceTensor& t : in) {
      bool same = t.dims.size() == first.dims.size() && t.dtype == first.dtype;
      for (size_t d = 0; same && d < dims.size(); ++d) same = d == axis || t.dims[d] == dims[d];
      attrs.check(same, "input {} {} does not match {} {} outside axis {}", dtype_name(t.dtype),
                  dims_to_string(t.dims), dtype_name(first.dtype), dims_to_string(first.dims),
                  axis);
      KILN_CHECK(t.layout == first.layout, ErrorCode::Internal,
                 "node {}: inputs in layouts {} and {}", node_.label(), t.layout.to_string(),
                 first.layout.to_string());
      dims[axis] += t.dims[axis];
    }
    DeviceTensor y = out.allocate(0, first.dtype, dims);
    KILN_CHECK(y.layout == first.layout, ErrorCode::Internal, "node {}: layout {} in, {} out",
               node_.label(), first.layout.to_string(), y.layout.to_string());
    const bool channels_last = y.layout.kind == Layout::Kind::ChannelsLast;
    if (!y.layout.is_row_major()) {
      for (const DeviceTensor& t : in) {
        KILN_CHECK(
            axis == 1 && (channels_last ? t.dims.size() == 4 : t.dims[1] % y.layout.block == 0),
            ErrorCode::Internal, "node {}: concat of {} on axis {} in layout {}", node_.label(),
            dims_to_string(t.dims), axis, y.layout.to_string());
      }
    }
    const size_t esize = dtype_size(first.dtype);
    int64_t outer = 1, inner = 1;
    if (channels_last) {
      // (N, H, W, C) in memory: each pixel's channels are its row.
      outer = dims[0] * dims[2] * dims[3];
    } else {
      for (size_t d = 0; d < axis; ++d) outer *= dims[d];
      for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
    }
    const size_t row_bytes = static_cast<size_t>(dims[axis] * inner) * esize;
    if (outer == 0 || row_bytes == 0) return;
    auto* py = static_cast<char*>(y.data);
    std::vector<std::pair<const char*, size_t>> parts;  // each input's bytes per row
    for (const DeviceTensor& t : in) {
      parts.push_back(
          {static_cast<const char*>(t.data), static_cast<size_t>(t.dims[axis] * inner) * esize});
    }
    // Rows in parallel when there are many; a few big rows copy at memory speed on one thread.
#pragma omp parallel for schedule(static) if (outer > 1 && outer * row_bytes > (size_t{1} << 20))
    for (int64_t o = 0; o < outer; ++o) {
      char* dst = py + static_cast<size_t>(o) * row_bytes;
      for (const auto& [src, n] : parts) {
        if (n) std::memcpy(dst, src + static_cast<size_t>(o) * n, n);
        dst += n;
      }
    }
  }

 private:
  // 8-bit images joined along channels (a static INT8 network's blocks, between int8
  // convolutions that exchange channels-last tensors): concatenated in that layout, as rows of
  // each pixel's channels.
  bool channels_of_8bit_images() const {
    if (axis_ != 1 && axis_ != -3) return false;
    for (size_t i = 0; i < node_.inputs().size(); ++i) {
      const DataType t = node_.input(i)->type().dtype;
      auto d = declared_dims(node_, i);
      if ((t != DataType::UInt8 && t != DataType::Int8) || !d || d->size() != 4) return false;
    }
    return true;
  }

  const ir::Node& node_;
  int64_t axis_;
};

std::unique_ptr<Kernel> create_concat(const ir::Node& node) {
  return std::make_unique<ConcatKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Concat",
                      .name = "cpu.concat",
                      .check = check_concat,
                      .create = create_concat});

}  // namespace kiln::backends::cpu
