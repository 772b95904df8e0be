// BatchNormalization in inference mode on the CPU: a per-channel affine map,
// y = x * scale / sqrt(var + eps) + (B - mean * scale / sqrt(var + eps)), its two coefficients
// folded once when the parameters are constants (the usual case: a BatchNormalization left
// standing is one the optimizer could not fold into a convolution, DenseNet's pre-activations).
// Row-major or channel-blocked input, the output in the same layout.
#include <algorithm>
#include <array>
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_batchnorm(const ir::Node& node) {
  if (node.opset() < 7) return "opset < 7 (is_test / consumed_inputs semantics)";
  if (node.inputs().size() != 5) return "not five inputs";
  if (node.outputs().size() > 1 && std::any_of(node.outputs().begin() + 1, node.outputs().end(),
                                               [](const ir::Value* v) { return v != nullptr; })) {
    return "training outputs";
  }
  ops::AttrReader attrs(node);
  if (attrs.attr_int("training_mode", 0) != 0) return "training_mode";
  if (attrs.attr_int("spatial", 1) != 1) return "spatial = 0";
  if (std::string why = check_f32_input(node, 0, 2, 8); !why.empty()) return why;
  for (size_t i = 1; i < 5; ++i) {
    if (std::string why = check_f32_input(node, i, 1, 1); !why.empty()) return why;
  }
  return check_f32_outputs(node);
}

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const ir::Node& node)
      : node_(node), epsilon_(ops::AttrReader(node).attr_float("epsilon", 1e-5f)) {
    std::array<const Tensor*, 4> params;
    for (size_t i = 0; i < 4; ++i) params[i] = constant_input(node, i + 1);
    if (std::all_of(params.begin(), params.end(), [](const Tensor* t) { return t != nullptr; })) {
      fold(params[0]->data<float>(), params[1]->data<float>(), params[2]->data<float>(),
           params[3]->data<float>(), params[0]->numel());
      folded_ = true;
    }
  }
  std::string_view name() const override { return "cpu.batchnorm"; }
  // The parameters are per-channel vectors: X and Y share a layout, they stay row-major.
  BlockedLayouts blocked_layouts() const override {
    auto x = declared_dims(node_, 0);
    return {.follows = x && x->size() == 4 ? 0 : -1};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const int64_t c = x.dims[1];
    for (size_t i = 1; i < 5; ++i) {
      KILN_CHECK_ARG(in[i].dims.size() == 1 && in[i].dims[0] == c,
                     "node {}: input {} is {}, not the {} channels of X {}", node_.label(), i,
                     dims_to_string(in[i].dims), c, dims_to_string(x.dims));
    }
    if (!folded_) {
      fold(static_cast<const float*>(in[1].data), static_cast<const float*>(in[2].data),
           static_cast<const float*>(in[3].data), static_cast<const float*>(in[4].data), c);
    }
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    if (y.numel() == 0) return;
    const auto* px = static_cast<const float*>(x.data);
    auto* py = static_cast<float*>(y.data);
    const int64_t n = x.dims[0], inner = shape_numel(x.dims) / (n * c);
    if (!x.layout.is_row_major()) {
      KILN_CHECK(y.layout == x.layout && x.dims.size() == 4, ErrorCode::Internal,
                 "node {}: layout {} in, {} out", node_.label(), x.layout.to_string(),
                 y.layout.to_string());
      const int64_t b = x.layout.block, cb = (c + b - 1) / b;
      // Padding lanes get 0 * x + 0: they stay zero.
      std::vector<float> a(cb * b, 0.f), s(cb * b, 0.f);
      std::copy(scale_.begin(), scale_.end(), a.begin());
      std::copy(shift_.begin(), shift_.end(), s.begin());
#pragma omp parallel for schedule(static) if (n * cb * inner * b > 32768)
      for (int64_t i = 0; i < n * cb; ++i) {
        const int64_t k = (i % cb) * b;
        blocked_channel_affine(px + i * inner * b, a.data() + k, s.data() + k, inner,
                               static_cast<int>(b), py + i * inner * b);
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n * c * inner > 32768)
    for (int64_t i = 0; i < n * c; ++i) {
      affine(px + i * inner, scale_[i % c], shift_[i % c], inner, py + i * inner);
    }
  }

 private:
  void fold(const float* scale, const float* bias, const float* mean, const float* var, int64_t c) {
    scale_.resize(c);
    shift_.resize(c);
    for (int64_t i = 0; i < c; ++i) {
      // In double, as the reference kernel computes it, then rounded once.
      const double k = scale[i] / std::sqrt(static_cast<double>(var[i]) + epsilon_);
      scale_[i] = static_cast<float>(k);
      shift_[i] = static_cast<float>(bias[i] - mean[i] * k);
    }
  }

  const ir::Node& node_;
  float epsilon_;
  bool folded_ = false;
  std::vector<float> scale_, shift_;
};

std::unique_ptr<Kernel> create_batchnorm(const ir::Node& node) {
  return std::make_unique<BatchNormKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "BatchNormalization",
                      .name = "cpu.batchnorm",
                      .check = check_batchnorm,
                      .create = create_batchnorm});

}  // namespace kiln::backends::cpu
