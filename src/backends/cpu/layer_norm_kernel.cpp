// LayerNormalization (ai.onnx, and ai.kiln's copy for older opsets) and ai.kiln
// SkipLayerNormalization on the CPU, float32 or bfloat16 (a `--bf16` engine's): each row of the
// normalized dims (every dim from `axis` on; Skip: the last) in three vector passes
// (backends/cpu/norm_row.hpp). A bfloat16 row is summed and normalized in float32 scratch and
// rounded once; the widening twin (fp16_kernels.cpp) had converted whole tensors around the
// float32 kernel, 1.5x this kernel's time on BERT-base's rows. Scale and bias
// must have exactly the normalized dims, and Mean / InvStdDev are not produced (the optimizer's
// fusions never ask for them): such nodes stay on the reference.
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/norm_row.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/kernel_table.hpp"
#include "core/half_convert.hpp"
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

// float32, or bfloat16 (every input and output of the node the same).
DataType node_type(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  return x && x->type().is_tensor() && x->type().dtype == DataType::BFloat16 ? DataType::BFloat16
                                                                             : DataType::Float32;
}

std::string check_layer_norm(const ir::Node& node) {
  const bool skip = is_skip(node);
  const size_t params = skip ? 2 : 1;  // where scale (gamma) is
  for (size_t i = 1; i < node.outputs().size(); ++i) {
    if (node.output(i) && !(skip && i == 3)) return "Mean / InvStdDev outputs";
  }
  const DataType type = node_type(node);
  if (std::string why = check_float_input(node, 0, type, 1, 8); !why.empty()) return why;
  if (skip) {
    if (std::string why = check_float_input(node, 1, type, 1, 8); !why.empty()) return why;
    const Shape& x = *node.input(0)->type().shape;
    if (!known_dims(x) || !(*node.input(1)->type().shape == x)) {
      return "skip of another or unnamed dynamic shape than the input";
    }
    if (std::string why = check_float_input(node, 4, type, 1, 1, true); !why.empty()) return why;
  }
  auto nd = normalized_dims(node);
  if (!nd) return "normalized dims not static";
  for (size_t i = params; i < params + 2 && i < node.inputs().size(); ++i) {
    if (std::string why = check_float_input(node, i, type, 1, 8, i > params); !why.empty()) {
      return why;
    }
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
  return check_float_outputs(node, type);
}

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const ir::Node& node)
      : node_(node),
        skip_(is_skip(node)),
        bf16_(node_type(node) == DataType::BFloat16),
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
    if (bf16_) {
      run_bf16(in, out);
      return;
    }
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    auto* py = static_cast<float*>(y.data);
    const auto* px = static_cast<const float*>(x.data);
    float* sum = nullptr;  // Skip's output 3, x + skip (+ bias), when asked for
    if (skip_ && node_.outputs().size() > 3 && node_.output(3)) {
      sum = static_cast<float*>(out.allocate(3, DataType::Float32, x.dims).data);
    }
    const auto* ps = skip_ ? static_cast<const float*>(in[1].data) : nullptr;
    const int64_t rows = total / row_, n = row_;
    const NormRow r{.n = n, .epsilon = epsilon_, .gamma = gamma, .beta = beta, .bias = bias};
    // The sum goes to output 3 when there is one, else through the result's own row (each
    // element is read before it is written).
#pragma omp parallel for schedule(static) if (total > 32768)
    for (int64_t i = 0; i < rows; ++i) {
      float* row_sum = sum ? sum + i * n : nullptr;
      norm_row(r, px + i * n, ps ? ps + i * n : nullptr, py + i * n, row_sum,
               row_sum ? row_sum : py + i * n);
    }
  }

 private:
  // The same in bfloat16: the sum and statistics in float32 scratch, the result (and the sum
  // into output 3 when asked for) rounded once.
  void run_bf16(std::span<const DeviceTensor> in, KernelOutputs& out) {
    const DeviceTensor& x = in[0];
    const size_t gi = skip_ ? 2 : 1;
    const int64_t n = row_, rows = shape_numel(x.dims) / row_;
    // The parameters widened once a run (a row's worth each).
    auto widened = [&](size_t i, int64_t count) {
      std::vector<float> v;
      if (in.size() > i && in[i].defined()) {
        v.resize(static_cast<size_t>(count));
        bfloat16s_to_floats(static_cast<const uint16_t*>(in[i].data), v.data(), v.size());
      }
      return v;
    };
    const std::vector<float> gamma = widened(gi, n), beta = widened(gi + 1, n);
    const std::vector<float> bias = skip_ ? widened(4, n) : std::vector<float>{};
    DeviceTensor y = out.allocate(0, DataType::BFloat16, x.dims);
    if (rows == 0) return;
    uint16_t* sum = nullptr;
    if (skip_ && node_.outputs().size() > 3 && node_.output(3)) {
      sum = static_cast<uint16_t*>(out.allocate(3, DataType::BFloat16, x.dims).data);
    }
    const auto* px = static_cast<const uint16_t*>(x.data);
    const auto* ps = skip_ ? static_cast<const uint16_t*>(in[1].data) : nullptr;
    auto* py = static_cast<uint16_t*>(y.data);
    auto data = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    const NormRow r{
        .n = n, .epsilon = epsilon_, .gamma = data(gamma), .beta = data(beta), .bias = data(bias)};
#pragma omp parallel if (rows * n > 32768)
    {
      std::vector<float> scratch(static_cast<size_t>(n));
#pragma omp for schedule(static)
      for (int64_t i = 0; i < rows; ++i) {
        norm_row(r, px + i * n, ps ? ps + i * n : nullptr, py + i * n, sum ? sum + i * n : nullptr,
                 scratch.data());
      }
    }
  }

  const ir::Node& node_;
  bool skip_;
  bool bf16_;
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
