// LayerNormalization (ai.onnx, and ai.kiln's copy for older opsets) and ai.kiln
// SkipLayerNormalization on the CPU, float32: each row of the normalized dims (every dim from
// `axis` on; Skip: the last) reduced in one vector pass for the mean and one for the variance,
// then scaled. Scale and bias must have exactly the normalized dims, and Mean / InvStdDev are
// not produced (the optimizer's fusions never ask for them): such nodes stay on the reference.
#include <algorithm>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {
namespace {

bool is_skip(const ir::Node& node) {
  return node.op_type() == "SkipLayerNormalization";
}

// The dims LayerNormalization normalizes over, when they are static.
std::optional<std::vector<int64_t>> normalized_dims(const ir::Node& node) {
  auto x = declared_dims(node, 0);
  if (!x || x->empty()) return std::nullopt;
  const auto rank = static_cast<int64_t>(x->size());
  int64_t axis = is_skip(node) ? -1 : ops::AttrReader(node).attr_int("axis", -1);
  if (axis < -rank || axis >= rank) return std::nullopt;
  if (axis < 0) axis += rank;
  std::vector<int64_t> d(x->begin() + axis, x->end());
  if (std::count(d.begin(), d.end(), -1) != 0) return std::nullopt;
  return d;
}

std::string check_layer_norm(const ir::Node& node) {
  const bool skip = is_skip(node);
  const size_t params = skip ? 2 : 1;  // where scale (gamma) is
  for (size_t i = 1; i < node.outputs().size(); ++i) {
    if (node.output(i) && !(skip && i == 3)) return "Mean / InvStdDev outputs";
  }
  if (std::string why = check_f32_input(node, 0, 1, 8); !why.empty()) return why;
  if (skip) {
    if (std::string why = check_f32_input(node, 1, 1, 8); !why.empty()) return why;
    const Shape& x = *node.input(0)->type().shape;
    if (!known_dims(x) || !(*node.input(1)->type().shape == x)) {
      return "skip of another or unnamed dynamic shape than the input";
    }
    if (std::string why = check_f32_input(node, 4, 1, 1, true); !why.empty()) return why;
  }
  auto nd = normalized_dims(node);
  if (!nd) return "normalized dims not static";
  for (size_t i = params; i < params + 2 && i < node.inputs().size(); ++i) {
    if (std::string why = check_f32_input(node, i, 1, 8, i > params); !why.empty()) return why;
    if (!node.input(i)) continue;
    auto p = declared_dims(node, i);
    if (!p || *p != *nd) {
      return "scale or bias not of the normalized dims";
    }
  }
  if (skip && node.input(4)) {
    auto b = declared_dims(node, 4);
    if (!b || (*b)[0] != nd->back()) return "bias not of the last dim";
  }
  return check_f32_outputs(node);
}

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const ir::Node& node)
      : node_(node),
        skip_(is_skip(node)),
        epsilon_(ops::AttrReader(node).attr_float("epsilon", 1e-5f)),
        row_(shape_numel(*normalized_dims(node))) {}
  std::string_view name() const override { return "cpu.layer_norm"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const size_t gi = skip_ ? 2 : 1;
    auto optional = [&](size_t i) -> const float* {
      return in.size() > i && in[i].defined() ? static_cast<const float*>(in[i].data) : nullptr;
    };
    const float* gamma = optional(gi);
    const float* beta = optional(gi + 1);
    const float* bias = skip_ ? optional(4) : nullptr;
    const int64_t total = shape_numel(x.dims);
    KILN_CHECK_ARG(row_ > 0 && total % row_ == 0 && (x.dims.empty() || x.dims.back() > 0),
                   "node {}: input {} does not end in the {} normalized elements", node_.label(),
                   dims_to_string(x.dims), row_);
    if (skip_) {
      KILN_CHECK_ARG(in[1].dims == x.dims, "node {}: skip {} is not of the input's shape {}",
                     node_.label(), dims_to_string(in[1].dims), dims_to_string(x.dims));
    }
    for (size_t i = skip_ ? 2 : 1; i < in.size(); ++i) {
      if (!in[i].defined()) continue;
      const int64_t want = i == 4 ? x.dims.back() : row_;
      KILN_CHECK_ARG(shape_numel(in[i].dims) == want, "node {}: input {} is {}, expected {} values",
                     node_.label(), i, dims_to_string(in[i].dims), want);
    }
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    if (total == 0) return;
    auto* py = static_cast<float*>(y.data);
    const auto* px = static_cast<const float*>(x.data);
    float* sum = nullptr;  // Skip: input + skip (+ bias), normalized from there
    if (skip_) {
      sum = py;
      if (node_.outputs().size() > 3 && node_.output(3)) {
        sum = static_cast<float*>(out.allocate(3, DataType::Float32, x.dims).data);
      }
    }
    const auto* ps = skip_ ? static_cast<const float*>(in[1].data) : nullptr;
    const int64_t rows = total / row_, n = row_;
    const float eps = epsilon_;
#pragma omp parallel for schedule(static) if (total > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = px + r * n;
      if (sum) {
        float* s = sum + r * n;
        binary_same_shape(BinaryOp::Add, src, ps + r * n, false, s, n);
        if (bias) binary_same_shape(BinaryOp::Add, s, bias, false, s, n);
        src = s;
      }
      layer_norm_row(src, n, eps, gamma, beta, py + r * n);
    }
  }

 private:
  const ir::Node& node_;
  bool skip_;
  float epsilon_;
  int64_t row_;
};

std::unique_ptr<Kernel> create_layer_norm(const ir::Node& node) {
  return std::make_unique<LayerNormKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "LayerNormalization",
                      .name = "cpu.layer_norm",
                      .check = check_layer_norm,
                      .create = create_layer_norm});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "LayerNormalization",
                      .name = "cpu.layer_norm",
                      .check = check_layer_norm,
                      .create = create_layer_norm});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "SkipLayerNormalization",
                      .name = "cpu.layer_norm",
                      .check = check_layer_norm,
                      .create = create_layer_norm});

}  // namespace kiln::backends::cpu
