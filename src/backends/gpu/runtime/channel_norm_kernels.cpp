// BatchNormalization (inference, constant parameters, per channel) and LRN on the GPU
// (kernels/channel_norm.hip): [N, C, ...] in float32, float16 or bfloat16, row-major or
// channels-last (output in the input's layout). Batch normalization that a convolution before
// it absorbs never gets here (passes/fuse_conv_batchnorm); these are the ones after a Concat or
// a graph input. Training mode and parameters computed at run time fall back to the CPU.
#include <fmt/format.h>

#include <cmath>

#include "backends/gpu/kernels/channel_norm.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::gpu {
namespace {

std::string check_input(const ir::Node& node) {
  if (std::string why = check_float_input(node, 0); !why.empty()) return why;
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank || *rank < 2) return fmt::format("{} on the GPU needs [N, C, ...]", node.op_type());
  for (size_t k = 1; k < node.outputs().size(); ++k) {
    if (node.output(k)) return fmt::format("{} output {} on the GPU", node.op_type(), k);
  }
  return "";
}

kernels::ChannelShape shape_of(const DeviceTensor& x) {
  kernels::ChannelShape s;
  s.images = x.dims[0];
  s.channels = x.dims[1];
  for (size_t d = 2; d < x.dims.size(); ++d) s.spatial *= x.dims[d];
  s.channels_last = x.layout.kind == Layout::Kind::ChannelsLast;
  return s;
}

// ---- BatchNormalization ----

std::string check_batch_norm(const ir::Node& node) {
  if (std::string why = check_input(node); !why.empty()) return why;
  const ops::AttrReader attrs(node);
  try {
    if (node.opset() >= 14 && attrs.attr_int("training_mode", 0) != 0)
      return "BatchNormalization in training mode on the GPU";
    if (node.opset() < 9 && attrs.attr_int("spatial", 1) == 0)
      return "BatchNormalization with spatial=0 on the GPU";
  } catch (const Error& e) {
    return e.message();
  }
  const TypeInfo& x = node.input(0)->type();
  if (!x.shape || !x.shape->dims()[1].is_static())
    return "BatchNormalization on the GPU needs a static channel count";
  const int64_t c = x.shape->dims()[1].value();
  for (size_t k = 1; k <= 4; ++k) {
    const ir::Value* v = k < node.inputs().size() ? node.input(k) : nullptr;
    if (!v || !v->is_constant() || v->constant().numel() != c ||
        !dtype_is_float(v->constant().dtype())) {
      return fmt::format(
          "BatchNormalization on the GPU needs constant {}-element parameters "
          "(input {})",
          c, k);
    }
  }
  return "";
}

class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(GpuBackendImpl& backend, const ir::Node& node)
      : dtype_(node.input(0)->type().dtype) {
    const Tensor& scale = node.input(1)->constant();
    const Tensor& bias = node.input(2)->constant();
    const Tensor& mean = node.input(3)->constant();
    const Tensor& var = node.input(4)->constant();
    const double eps = ops::AttrReader(node).attr_float("epsilon", 1e-5f);
    channels_ = scale.numel();
    std::vector<float> ab(static_cast<size_t>(2 * channels_));
    for (int64_t c = 0; c < channels_; ++c) {
      const double a = scale.double_at(c) / std::sqrt(var.double_at(c) + eps);
      ab[static_cast<size_t>(c)] = static_cast<float>(a);
      ab[static_cast<size_t>(channels_ + c)] =
          static_cast<float>(bias.double_at(c) - mean.double_at(c) * a);
    }
    ab_ = backend.upload(ab.data(), ab.size() * sizeof(float));
  }
  std::string_view name() const override { return "gpu.batch_norm"; }
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK_ARG(x.dims.size() >= 2 && x.dims[1] == channels_,
                   "gpu.batch_norm: input {} has not {} channels", dims_to_string(x.dims),
                   channels_);
    DeviceTensor y = outputs.allocate(0, dtype_, x.dims);
    check_launch(kernels::launch_batch_norm(*float_type(dtype_), x.data, y.data, shape_of(x),
                                            static_cast<const float*>(ab_.data()),
                                            gpu_stream(stream).handle()),
                 name());
  }

 private:
  DataType dtype_;
  int64_t channels_ = 0;
  DeviceBuffer ab_;  // the multipliers, then the offsets
};

// ---- LRN ----

std::string check_lrn(const ir::Node& node) {
  if (std::string why = check_input(node); !why.empty()) return why;
  try {
    const int64_t size = ops::AttrReader(node).attr_int("size");
    if (size <= 0 || size > (1 << 16)) return fmt::format("LRN size {}", size);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

class LrnKernel final : public Kernel {
 public:
  explicit LrnKernel(const ir::Node& node) : dtype_(node.input(0)->type().dtype) {
    const ops::AttrReader attrs(node);
    size_ = static_cast<int>(attrs.attr_int("size"));
    alpha_ = attrs.attr_float("alpha", 1e-4f);
    beta_ = attrs.attr_float("beta", 0.75f);
    bias_ = attrs.attr_float("bias", 1.0f);
  }
  std::string_view name() const override { return "gpu.lrn"; }
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK_ARG(x.dims.size() >= 2, "gpu.lrn: input {} is not [N, C, ...]",
                   dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, dtype_, x.dims);
    check_launch(kernels::launch_lrn(*float_type(dtype_), x.data, y.data, shape_of(x), size_,
                                     alpha_, beta_, bias_, gpu_stream(stream).handle()),
                 name());
  }

 private:
  DataType dtype_;
  int size_ = 1;
  float alpha_ = 0, beta_ = 0, bias_ = 0;
};

std::unique_ptr<Kernel> create_batch_norm(Backend& backend, const ir::Node& node) {
  return std::make_unique<BatchNormKernel>(static_cast<GpuBackendImpl&>(backend), node);
}
std::unique_ptr<Kernel> create_lrn(const ir::Node& node) {
  return std::make_unique<LrnKernel>(node);
}

// Batch normalization reads each element once, at the output's index; LRN reads neighbours.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "BatchNormalization",
                      .name = "gpu.batch_norm",
                      .in_place_inputs = {0},
                      .check = check_batch_norm,
                      .create = create_batch_norm});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "LRN",
                      .name = "gpu.lrn",
                      .check = check_lrn,
                      .create = create_lrn});

}  // namespace
}  // namespace kiln::backends::gpu
