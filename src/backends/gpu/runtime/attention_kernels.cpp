// ai.kiln ScaledDotProductAttention on the GPU: one fused pass (Q K^T, online softmax, V), no
// score matrix; batch dims broadcast numpy-style across Q, K, V and the additive mask
// ([.., Sq or 1, Sk or 1]); plain [.., S, H] operands or bsnh's [.., S, N, H] read in place
// (attention_layout.hpp); head sizes up to 256. float16 with heads of 32, 64 or 128 on matrix
// tiles (attention_tiles.hip, where the device has them), everything else on FMA, a query per
// wavefront (attention.hip); float32, float16 and bfloat16, computed in float32.
#include <fmt/format.h>

#include <cmath>

#include "backends/gpu/kernels/attention.hpp"
#include "backends/gpu/runtime/attention_layout.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kName = "gpu.attention";

bool has_mask(const ir::Node& node) {
  return node.inputs().size() > 3 && node.input(3) != nullptr;
}

std::string check(const ir::Node& node) {
  const size_t operands = has_mask(node) ? 4 : 3;
  for (size_t slot = 0; slot < operands; ++slot) {
    if (std::string why = check_float_input(node, slot); !why.empty()) return why;
    if (node.input(slot)->type().dtype != node.input(0)->type().dtype)
      return "ScaledDotProductAttention operands of mixed element types";
  }
  const size_t min_rank = int_attr(node, "bsnh", 0) != 0 ? 3 : 2;
  for (size_t slot = 0; slot < 3; ++slot) {
    const TypeInfo& t = node.input(slot)->type();
    if (!t.shape || t.shape->rank() < min_rank) {
      return fmt::format(
          "ScaledDotProductAttention on the GPU needs Q, K and V of known rank >= {}", min_rank);
    }
    const Dim& head = t.shape->dims().back();
    if (slot != 1 && (!head.is_static() || head.value() > kernels::kAttentionMaxHead))
      return fmt::format(
          "ScaledDotProductAttention head size {} (the GPU kernel takes static sizes up to {})",
          head.is_static() ? std::to_string(head.value()) : "unknown", kernels::kAttentionMaxHead);
  }
  return "";
}

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(const GpuBackendImpl& backend, const ir::Node& node)
      : dtype_(node.input(0)->type().dtype),
        matrix_tiles_(has_matrix_tiles(backend.device_info())),
        multiprocessors_(backend.device_info().multiprocessors),
        scale_attr_(node.attributes().count("scale")
                        ? std::optional<float>(float_attr(node, "scale", 1.f))
                        : std::nullopt),
        zero_nan_probs_(int_attr(node, "zero_nan_probs", 0) != 0),
        bsnh_(int_attr(node, "bsnh", 0) != 0),
        // KILN_GPU_ATTENTION_WAVES=N: the matrix-tile kernel's wavefronts a block (16 queries
        // each), to measure the choice; otherwise the launcher's (0).
        waves_(env_int("KILN_GPU_ATTENTION_WAVES", 0)) {}
  std::string_view name() const override { return kName; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& q = in[0];
    const DeviceTensor& k = in[1];
    const DeviceTensor& v = in[2];
    const bool masked = in.size() > 3 && in[3].defined();
    for (size_t slot = 0; slot < (masked ? 4u : 3u); ++slot) {
      KILN_CHECK(in[slot].dtype == dtype_, ErrorCode::Internal, "{}: operand {} is {}", kName, slot,
                 dtype_name(in[slot].dtype));
    }
    kernels::AttentionArgs a;
    const std::vector<int64_t> out_dims =
        plan_attention(q.dims, k.dims, v.dims, masked ? &in[3].dims : nullptr, bsnh_, a, kName);
    KILN_CHECK(a.d <= kernels::kAttentionMaxHead && a.dv <= kernels::kAttentionMaxHead,
               ErrorCode::Unsupported, "{}: head sizes {} and {} (at most {} on the GPU)", kName,
               a.d, a.dv, kernels::kAttentionMaxHead);
    a.scale = scale_attr_ ? *scale_attr_
                          : (a.d > 0 ? static_cast<float>(1.0 / std::sqrt(double(a.d))) : 1.f);
    DeviceTensor y = outputs.allocate(0, dtype_, out_dims);
    a.q = q.data;
    a.k = k.data;
    a.v = v.data;
    a.mask = masked ? in[3].data : nullptr;
    a.zero_nan_probs = zero_nan_probs_;
    a.matrix_tiles = matrix_tiles_;
    a.multiprocessors = multiprocessors_;
    a.waves = waves_;
    a.out = y.data;
    check_launch(kernels::launch_attention(*float_type(dtype_), a, gpu_stream(stream).handle()),
                 kName);
  }

 private:
  DataType dtype_;
  bool matrix_tiles_;
  int multiprocessors_;
  std::optional<float> scale_attr_;
  bool zero_nan_probs_;
  bool bsnh_;  // [.., S, N, H] operands and output (the op's bsnh)
  int waves_;
};

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  return std::make_unique<AttentionKernel>(static_cast<GpuBackendImpl&>(backend), node);
}

// Q is read by other queries' blocks after this block's output is written: no in-place.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "ScaledDotProductAttention",
                      .name = kName,
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
