// LayerNormalization (ONNX opset 17 and ai.kiln's) and ai.kiln SkipLayerNormalization on the GPU
// (layer_norm.hip): any axis, scale and bias (and SkipLayerNormalization's skip and bias) of a
// shape equal to x's last dims, the optional Mean / InvStdDev outputs in float32 (stash_type 1)
// and the input + skip (+ bias) sum. float32, float16 and bfloat16, statistics in float32.
#include <fmt/format.h>
#include <algorithm>

#include "backends/gpu/kernels/layer_norm.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

// Input slots of each op: x, skip, bias (of the sum), scale, beta; -1 where it has none.
struct Slots {
  int skip = -1, sum_bias = -1, scale = 1, beta = 2;
};

Slots slots_of(const ir::Node& node) {
  if (node.op_type() == "SkipLayerNormalization") return {1, 4, 2, 3};
  return {};
}

bool present(const ir::Node& node, int slot) {
  return slot >= 0 && static_cast<size_t>(slot) < node.inputs().size() &&
         node.input(static_cast<size_t>(slot)) != nullptr;
}

bool wants_output(const ir::Node& node, size_t slot) {
  return slot < node.outputs().size() && node.output(slot) != nullptr;
}

// "" when the declared `param` can be read as a suffix of x's dims, else why not.
std::string check_suffix(const ir::Node& node, int slot, const char* what) {
  const ir::Value* p = node.input(static_cast<size_t>(slot));
  const TypeInfo& tx = node.input(0)->type();
  if (p->type().dtype != tx.dtype)
    return fmt::format("{} {} has type {}, the input {}", node.op_type(), what,
                       p->type().to_string(), tx.to_string());
  const std::optional<std::vector<int64_t>> dims = static_dims(p);
  const std::vector<Dim>& xd = tx.shape->dims();
  if (!dims) {
    // A run-time shape (a skip of the input's own dynamic batch and sequence): a suffix when
    // its trailing dims are the input's own, the same numbers or the same symbols; the run
    // checks the real dims.
    const std::optional<Shape>& ps = p->type().shape;
    bool same = ps.has_value() && ps->dims().size() <= xd.size();
    for (size_t k = 0; same && k < ps->dims().size(); ++k) {
      const Dim& d = ps->dims()[ps->dims().size() - 1 - k];
      const Dim& xk = xd[xd.size() - 1 - k];
      same = (d.is_static() || d.is_symbolic()) && d == xk;
    }
    if (!same) {
      return fmt::format("{} {} {} is not the input's last dims ({}) before the run",
                         node.op_type(), what, p->type().to_string(), tx.to_string());
    }
    return "";
  }
  size_t first = 0;
  while (first < dims->size() && (*dims)[first] == 1) ++first;
  const size_t n = dims->size() - first;
  bool ok = n <= xd.size();
  for (size_t k = 0; ok && k < n; ++k) {
    const Dim& d = xd[xd.size() - n + k];
    ok = !d.is_static() || d.value() == (*dims)[first + k];
  }
  if (!ok)
    return fmt::format(
        "{} {} {} is not the input's last dims ({}): other broadcasts are not supported on "
        "the GPU",
        node.op_type(), what, dims_to_string(*dims), tx.to_string());
  return "";
}

std::string check(const ir::Node& node) {
  if (std::string why = check_float_input(node, 0); !why.empty()) return why;
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank || *rank < 1)
    return fmt::format("{} on the GPU needs the input's rank", node.op_type());
  const int64_t axis = int_attr(node, "axis", -1);
  if (!normalized_axis(axis, *rank))
    return fmt::format("{} axis {} is outside rank {}", node.op_type(), axis, *rank);
  const Slots s = slots_of(node);
  if (!present(node, s.scale)) return fmt::format("{} without a scale", node.op_type());
  if (s.skip >= 0 && !present(node, s.skip)) return "SkipLayerNormalization without a skip";
  for (auto [slot, what] : {std::pair{s.skip, "skip"}, std::pair{s.sum_bias, "bias"},
                            std::pair{s.scale, "scale"}, std::pair{s.beta, "B"}}) {
    if (!present(node, slot)) continue;
    if (std::string why = check_suffix(node, slot, what); !why.empty()) return why;
  }
  if ((wants_output(node, 1) || wants_output(node, 2)) && int_attr(node, "stash_type", 1) != 1)
    return fmt::format("{} with stash_type {} (the GPU keeps statistics in float32)",
                       node.op_type(), int_attr(node, "stash_type", 1));
  if (node.outputs().size() > (s.skip >= 0 ? 4u : 3u))
    return fmt::format("{} with {} outputs", node.op_type(), node.outputs().size());
  return "";
}

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const ir::Node& node)
      : slots_(slots_of(node)),
        name_(slots_.skip >= 0 ? "gpu.skip_layer_norm" : "gpu.layer_norm"),
        axis_(int_attr(node, "axis", -1)),
        epsilon_(float_attr(node, "epsilon", 1e-5f)),
        dtype_(node.input(0)->type().dtype) {
    for (size_t k = 0; k < 4; ++k) wants_[k] = wants_output(node, k);
  }
  std::string_view name() const override { return name_; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == dtype_, ErrorCode::Internal, "{}: input is {}, expected {}", name_,
               dtype_name(x.dtype), dtype_name(dtype_));
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    const std::optional<int64_t> axis = normalized_axis(axis_, rank);
    KILN_CHECK_ARG(axis.has_value(), "{}: axis {} is outside the input {}", name_, axis_,
                   dims_to_string(x.dims));
    kernels::LayerNormArgs a;
    a.rows = 1;
    a.cols = 1;
    for (int64_t d = 0; d < rank; ++d) (d < *axis ? a.rows : a.cols) *= x.dims[size_t(d)];
    a.epsilon = epsilon_;
    a.x = x.data;
    auto operand = [&](int slot, const void*& data, int64_t* n) {
      if (slot < 0 || static_cast<size_t>(slot) >= in.size() || !in[size_t(slot)].defined()) return;
      const DeviceTensor& p = in[size_t(slot)];
      KILN_CHECK_ARG(p.dtype == dtype_ && is_suffix_of(p.dims, x.dims),
                     "{}: operand {} ({} {}) is not a suffix of the input {}", name_, slot,
                     dtype_name(p.dtype), dims_to_string(p.dims), dims_to_string(x.dims));
      data = p.data;
      *n = p.numel();
    };
    operand(slots_.skip, a.skip, &a.skip_n);
    operand(slots_.sum_bias, a.bias, &a.bias_n);
    operand(slots_.scale, a.gamma, &a.gamma_n);
    operand(slots_.beta, a.beta, &a.beta_n);
    a.y = outputs.allocate(0, dtype_, x.dims).data;
    std::vector<int64_t> stat_dims = x.dims;
    for (size_t d = static_cast<size_t>(*axis); d < stat_dims.size(); ++d) stat_dims[d] = 1;
    if (wants_[1])
      a.mean = static_cast<float*>(outputs.allocate(1, DataType::Float32, stat_dims).data);
    if (wants_[2])
      a.inv_std = static_cast<float*>(outputs.allocate(2, DataType::Float32, stat_dims).data);
    if (wants_[3] && slots_.skip >= 0) a.sum = outputs.allocate(3, dtype_, x.dims).data;
    a.rows_per_wave = rows_per_wave_;
    check_launch(kernels::launch_layer_norm(*float_type(dtype_), a, gpu_stream(stream).handle()),
                 name_);
  }

 private:
  Slots slots_;
  const char* name_;
  int64_t axis_;
  float epsilon_;
  DataType dtype_;
  bool wants_[4] = {};
  // KILN_GPU_LN_ROWS=N: rows a wavefront walks in the vector kernel, to measure the choice.
  int rows_per_wave_ = std::max(1, env_int("KILN_GPU_LN_ROWS", 1));
};

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<LayerNormKernel>(node);
}

// A row is reduced whole before any of it is written, each element by the thread that read it
// (layer_norm.hip), so output 0 may take the input's space.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "LayerNormalization",
                      .name = "gpu.layer_norm",
                      .in_place_inputs = {0},
                      .check = check,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "LayerNormalization",
                      .name = "gpu.layer_norm",
                      .in_place_inputs = {0},
                      .check = check,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "SkipLayerNormalization",
                      .name = "gpu.skip_layer_norm",
                      .in_place_inputs = {0},
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
