// Slice, Expand and Tile on the CPU, each one strided copy (strided_copy.hpp): a Slice walks each
// input dim from its clamped start with stride x step (ops/slice_axis.hpp, the reference's own
// rules), an Expand walks a broadcast dim with stride 0, a Tile walks each dim as (repeat,
// element) pairs, the repeat with stride 0. Any element type but strings; the index inputs
// (starts, ends, axes, steps, shape, repeats) are read at run time, so computed ones work too.
#include <algorithm>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/movement_inputs.hpp"
#include "backends/cpu/strided_copy.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/slice_axis.hpp"

namespace kiln::backends::cpu {
namespace {

class SliceKernel final : public Kernel {
 public:
  explicit SliceKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.slice"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    ops::AttrReader attrs(node_);
    std::vector<int64_t> starts, ends, axes, steps;
    if (attrs.opset() < 10) {
      starts = attrs.attr_ints("starts");
      ends = attrs.attr_ints("ends");
      axes = attrs.attr_ints("axes", {});
    } else {
      attrs.check(given(in, 1) && given(in, 2), "needs starts and ends");
      starts = index_values(attrs, in[1], "starts");
      ends = index_values(attrs, in[2], "ends");
      if (given(in, 3)) axes = index_values(attrs, in[3], "axes");
      if (given(in, 4)) steps = index_values(attrs, in[4], "steps");
    }
    attrs.check(starts.size() == ends.size(), "starts has {} entries but ends has {}",
                starts.size(), ends.size());
    if (axes.empty() && !given(in, 3)) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (steps.empty() && !given(in, 4)) steps.assign(starts.size(), 1);
    attrs.check(axes.size() == starts.size() && steps.size() == starts.size(),
                "starts, ends, axes and steps have {}, {}, {} and {} entries", starts.size(),
                ends.size(), axes.size(), steps.size());
    const std::vector<int64_t> strides = ops::row_major_strides(x.dims);
    std::vector<ops::SliceAxis> per_axis(static_cast<size_t>(rank));
    for (size_t i = 0; i < per_axis.size(); ++i) per_axis[i] = {0, 1, x.dims[i]};
    axes = ops::normalize_axes(attrs, axes, rank);
    for (size_t k = 0; k < axes.size(); ++k) {
      attrs.check(steps[k] != 0, "slice step cannot be 0");
      const size_t a = static_cast<size_t>(axes[k]);
      per_axis[a] = ops::resolve_slice(x.dims[a], starts[k], ends[k], steps[k]);
    }
    std::vector<int64_t> dims(per_axis.size());
    std::vector<StridedAxis> walk(per_axis.size());
    int64_t base = 0;
    for (size_t i = 0; i < per_axis.size(); ++i) {
      dims[i] = per_axis[i].length;
      walk[i] = {per_axis[i].length, per_axis[i].step * strides[i]};
      if (per_axis[i].length > 0) base += per_axis[i].start * strides[i];
    }
    DeviceTensor y = out.allocate(0, x.dtype, dims);
    if (y.numel() == 0) return;
    const size_t esize = dtype_size(x.dtype);
    strided_copy(static_cast<const char*>(x.data) + base * static_cast<int64_t>(esize), walk, esize,
                 y.data);
  }

 private:
  const ir::Node& node_;
};

class ExpandKernel final : public Kernel {
 public:
  explicit ExpandKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.expand"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    ops::AttrReader attrs(node_);
    attrs.check(given(in, 1), "needs a shape");
    const std::vector<int64_t> shape = index_values(attrs, in[1], "shape");
    // numpy broadcasting of the input's dims and the shape, each aligned on the right.
    const std::vector<int64_t> dims = ops::broadcast_dims(attrs, {x.dims, shape});
    const std::vector<int64_t> strides = ops::broadcast_strides(x.dims, dims);
    std::vector<StridedAxis> walk(dims.size());
    for (size_t j = 0; j < dims.size(); ++j) walk[j] = {dims[j], strides[j]};
    DeviceTensor y = out.allocate(0, x.dtype, dims);
    if (y.numel() == 0) return;
    strided_copy(x.data, walk, dtype_size(x.dtype), y.data);
  }

 private:
  const ir::Node& node_;
};

class TileKernel final : public Kernel {
 public:
  explicit TileKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.tile"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    ops::AttrReader attrs(node_);
    attrs.check(given(in, 1) && in[1].dims.size() == 1, "repeats must be 1-D");
    const std::vector<int64_t> reps = index_values(attrs, in[1], "repeats");
    attrs.check(reps.size() == x.dims.size(), "repeats has {} entries for rank {}", reps.size(),
                x.dims.size());
    const std::vector<int64_t> strides = ops::row_major_strides(x.dims);
    std::vector<int64_t> dims(x.dims.size());
    std::vector<StridedAxis> walk;
    for (size_t i = 0; i < x.dims.size(); ++i) {
      attrs.check(reps[i] >= 0, "negative repeat {}", reps[i]);
      attrs.check(reps[i] == 0 || x.dims[i] <= std::numeric_limits<int64_t>::max() / reps[i],
                  "tiled dimension overflows");
      dims[i] = x.dims[i] * reps[i];
      // Output index rep * n + i along this dim: row-major over (rep, i).
      walk.push_back({reps[i], 0});
      walk.push_back({x.dims[i], strides[i]});
    }
    DeviceTensor y = out.allocate(0, x.dtype, dims);
    if (y.numel() == 0) return;
    strided_copy(x.data, walk, dtype_size(x.dtype), y.data);
  }

 private:
  const ir::Node& node_;
};

std::string check_tile(const ir::Node& node) {
  if (node.opset() < 6) return "Tile before opset 6 (tiles and axis inputs)";
  return check_data_input(node);
}

std::unique_ptr<Kernel> create_tile(const ir::Node& node) {
  return std::make_unique<TileKernel>(node);
}
std::unique_ptr<Kernel> create_slice(const ir::Node& node) {
  return std::make_unique<SliceKernel>(node);
}
std::unique_ptr<Kernel> create_expand(const ir::Node& node) {
  return std::make_unique<ExpandKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Slice",
                      .name = "cpu.slice",
                      .check = check_data_input,
                      .create = create_slice});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Tile",
                      .name = "cpu.tile",
                      .check = check_tile,
                      .create = create_tile});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Expand",
                      .name = "cpu.expand",
                      .check = check_data_input,
                      .create = create_expand});

}  // namespace kiln::backends::cpu
