// Resize (opset 10 and 11+) on the GPU (kernels/resize.hip) with the reference's plan
// (ops/resize_plan.hpp: the same output sizes, coordinates and taps, so the GPU resizes as the
// CPU does): every mode, coordinate transformation, nearest rule, cubic coefficient,
// exclude_outside, antialias and extrapolation value, any resized axes. Nearest moves any
// element type of 1, 2, 4 or 8 bytes as it is; linear and cubic take float32, float16 and
// bfloat16 (summed in float32). Input and output are row-major or channels-last (a 4-D value
// between convolutions), each read through its strides. roi, scales and sizes must be constants
// (the taps are planned on the host per input shape and uploaded once for it).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backends/gpu/kernels/resize.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/resize_walk.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "core/half.hpp"
#include "ops/kernel_context.hpp"
#include "ops/resize_plan.hpp"

namespace kiln::backends::gpu {
namespace {

using ops::resizing::Mode;

// A constant input given and not empty (ONNX models pass an empty roi or scales for "none").
bool given_nonempty(const ir::Node& node, size_t slot) {
  const ir::Value* v = node.input(slot);
  return v && !(v->is_constant() && v->constant().numel() == 0);
}

// The constant inputs, read once: roi (tf_crop_and_resize only), scales, sizes.
struct ResizeInputs {
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
};

// Reads the constant inputs into `out`; "" or why the GPU cannot take the node.
std::string read_inputs(const ir::Node& node, const ops::resizing::ResizeAttrs& a,
                        ResizeInputs& out) {
  const bool legacy = node.opset() < 11;
  const size_t scales_slot = legacy ? 1 : 2;
  if (!legacy && a.coord == "tf_crop_and_resize" && given_nonempty(node, 1)) {
    std::optional<std::vector<double>> roi = constant_floats(node, 1);
    if (!roi) return "Resize's roi must be a constant float32/float64 on the GPU";
    out.roi = std::move(*roi);
  }
  if (given_nonempty(node, scales_slot)) {
    std::optional<std::vector<double>> scales = constant_floats(node, scales_slot);
    if (!scales) return "Resize's scales must be a constant float32/float64 on the GPU";
    out.scales = std::move(*scales);
  }
  if (!legacy && given_nonempty(node, 3)) {
    std::optional<std::vector<int64_t>> sizes = constant_ints(node, 3);
    if (!sizes) return "Resize's sizes must be a constant int64 on the GPU";
    out.sizes = std::move(*sizes);
  }
  if (out.scales.empty() == out.sizes.empty()) {
    return "Resize needs exactly one of scales and sizes";
  }
  return "";
}

// Each output element sums the product of its resized dims' taps (2 x 2 bilinear, 4 x 4
// bicubic); an antialiased shrink widens them by the factor. Past this many an element the GPU
// refuses the shape (the CPU's separable passes take it), so no launch runs unbounded work.
constexpr int64_t kMaxTapsPerElement = 4096;

// Why the taps of `plan` are too many for the GPU, or "".
std::string too_many_taps(const ops::resizing::ResizePlan& plan) {
  int64_t taps = 1;
  for (const ops::resizing::AxisPlan& p : plan.axes) {
    if (!p.identity && p.out > 0) taps *= std::min<int64_t>(p.taps, kMaxTapsPerElement + 1);
    if (taps > kMaxTapsPerElement) {
      return fmt::format("Resize with more than {} taps an output element on the GPU",
                         kMaxTapsPerElement);
    }
  }
  return "";
}

std::string check(const ir::Node& node) {
  if (node.opset() < 10) return "Resize before opset 10";
  if (std::string why = check_movable_input(node, 0); !why.empty()) return why;
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank) return "Resize on the GPU needs the input's rank";
  if (*rank > kernels::kMaxDims) {
    return fmt::format("Resize of rank {} (the GPU takes up to {})", *rank, kernels::kMaxDims);
  }
  try {
    const ops::AttrReader attrs(node);
    const ops::resizing::ResizeAttrs a = ops::resizing::read_resize_attrs(attrs, node.opset() < 11);
    if (a.mode != Mode::Nearest && !float_type(node.input(0)->type().dtype)) {
      return fmt::format("Resize interpolates float32, float16 and bfloat16 on the GPU, not {}",
                         node.input(0)->type().to_string());
    }
    (void)ops::resizing::resize_axes(attrs, static_cast<size_t>(*rank));
    ResizeInputs inputs;
    if (std::string why = read_inputs(node, a, inputs); !why.empty()) return why;
    // With static dims the plan is known now: a shape with too many taps stays on the CPU.
    if (const std::optional<std::vector<int64_t>> dims = static_dims(node.input(0))) {
      return too_many_taps(ops::resizing::make_resize_plan(
          attrs, a, *dims, ops::resizing::resize_axes(attrs, dims->size()), inputs.scales,
          inputs.sizes, inputs.roi));
    }
    return "";
  } catch (const Error& e) {
    return e.message();
  }
}

// The extrapolation value in the element type's bits (tf_crop_and_resize; any other
// coordinate mode never extrapolates).
uint64_t fill_bits(DataType t, double value) {
  uint64_t bits = 0;
  switch (t) {
    case DataType::Float32: {
      const float v = static_cast<float>(value);
      std::memcpy(&bits, &v, sizeof v);
      return bits;
    }
    case DataType::Float64:
      std::memcpy(&bits, &value, sizeof value);
      return bits;
    case DataType::Float16:
      return float_to_half_bits(static_cast<float>(value));
    case DataType::BFloat16:
      return float_to_bfloat16_bits(static_cast<float>(value));
    default:
      // Integer elements take the value converted (what a cast of it would give).
      if (dtype_is_integer(t)) {
        const auto v = static_cast<int64_t>(value);
        std::memcpy(&bits, &v, dtype_size(t));  // little-endian: the low bytes
      }
      return bits;
  }
}

// The taps of one input shape on the device.
struct ShapeTaps {
  std::vector<int64_t> in_dims, out_dims;
  std::vector<int> taps;  // per dim, 0 where it is not resized
  std::vector<DeviceBuffer> index, weight;
};

class ResizeKernel final : public Kernel {
 public:
  ResizeKernel(Backend& backend, const ir::Node& node)
      : backend_(static_cast<GpuBackendImpl&>(backend)),
        node_(node),
        attrs_(ops::resizing::read_resize_attrs(ops::AttrReader(node), node.opset() < 11)) {
    const std::string why = read_inputs(node, attrs_, inputs_);
    KILN_CHECK(why.empty(), ErrorCode::Internal, "gpu.resize {}: {}", node.name(), why);
  }
  std::string_view name() const override { return "gpu.resize"; }
  // Each side read or written through its own strides: a channels-last 4-D value stays so.
  BlockedLayouts blocked_layouts() const override { return {.input0 = true, .output0 = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const ShapeTaps& plan = taps_for(x.dims);
    DeviceTensor y = outputs.allocate(0, x.dtype, plan.out_dims);
    if (y.numel() == 0) return;
    const size_t rank = x.dims.size();
    std::vector<kernels::ResizeDim> taps(rank);
    for (size_t d = 0; d < rank; ++d) {
      if (plan.taps[d] == 0) continue;
      taps[d] = {plan.taps[d], static_cast<const int32_t*>(plan.index[d].data()),
                 static_cast<const float*>(plan.weight[d].data())};
    }
    const kernels::ResizeWalk walk = make_resize_walk(
        x.dims, plan.out_dims, taps, rank == 4 && x.layout.kind == Layout::Kind::ChannelsLast,
        rank == 4 && y.layout.kind == Layout::Kind::ChannelsLast);
    const hipStream_t s = gpu_stream(stream).handle();
    if (attrs_.mode == Mode::Nearest) {
      check_launch(
          kernels::launch_resize_nearest(movable_size(x.dtype), x.data, y.data, y.numel(), walk,
                                         fill_bits(x.dtype, attrs_.extrapolation), s),
          name());
    } else {
      check_launch(
          kernels::launch_resize_interpolate(*float_type(x.dtype), x.data, y.data, y.numel(), walk,
                                             static_cast<float>(attrs_.extrapolation), s),
          name());
    }
  }

 private:
  // The taps of input dims `dims`, planned and uploaded at the first run of that shape (an
  // eager run: a recorded run of the same shape finds them).
  const ShapeTaps& taps_for(const std::vector<int64_t>& dims) {
    if (const ShapeTaps* t = cache_.find([&](const ShapeTaps& e) { return e.in_dims == dims; }))
      return *t;
    const ops::AttrReader attrs(node_);
    const std::vector<int64_t> axes = ops::resizing::resize_axes(attrs, dims.size());
    const ops::resizing::ResizePlan plan = ops::resizing::make_resize_plan(
        attrs, attrs_, dims, axes, inputs_.scales, inputs_.sizes, inputs_.roi);
    if (std::string why = too_many_taps(plan); !why.empty()) attrs.fail("{}", why);
    ShapeTaps t;
    t.in_dims = dims;
    t.out_dims = plan.out_dims;
    t.taps.assign(dims.size(), 0);
    t.index.resize(dims.size());
    t.weight.resize(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) {
      const ops::resizing::AxisPlan& p = plan.axes[d];
      if (p.identity || p.out == 0) continue;
      attrs.check(p.in <= INT32_MAX && p.taps <= INT32_MAX,
                  "gpu.resize: axis {} of {} elements is too long", d, p.in);
      const size_t count = p.index.size();
      std::vector<int32_t> index(count);
      std::vector<float> weight(count);
      for (size_t k = 0; k < count; ++k) {
        index[k] = static_cast<int32_t>(p.index[k]);
        weight[k] = static_cast<float>(p.weight[k]);
      }
      for (int64_t q = 0; q < p.out; ++q) {
        if (p.extrapolate[static_cast<size_t>(q)]) index[static_cast<size_t>(q * p.taps)] = -1;
      }
      t.taps[d] = static_cast<int>(p.taps);
      t.index[d] = backend_.upload(index.data(), index.size() * sizeof(int32_t));
      t.weight[d] = backend_.upload(weight.data(), weight.size() * sizeof(float));
    }
    return cache_.add(std::move(t));
  }

  GpuBackendImpl& backend_;
  const ir::Node& node_;
  ops::resizing::ResizeAttrs attrs_;
  ResizeInputs inputs_;
  ShapeCache<ShapeTaps> cache_;
};

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  return std::make_unique<ResizeKernel>(backend, node);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Resize",
                      .name = "gpu.resize",
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
