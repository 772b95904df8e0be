// Conv and ai.kiln FusedConv of an input with few channels (group 1, at most 4 input channels,
// a short filter: a network's stem) through Kiln's own kernel (kernels/stem_conv.hip), before
// cuDNN, which padded the three channels to its tiles and took 390 us for MobileNetV2 b64's
// 3x3 stem on an H100 (about 18x its memory time; bench/results/2026-12-06d-gpu-stem-conv.md). The
// kernel reads the input in either layout and writes channels-last; a row-major output (a
// graph's edge) is transposed through scratch. float32, float16, bfloat16; any stride,
// dilation and pads; bias and every fused activation. KILN_GPU_STEM=0 refuses every node, so
// cuDNN takes them again.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backends/gpu/kernels/stem_conv.hpp"
#include "backends/gpu/runtime/channels_last_io.hpp"
#include "backends/gpu/runtime/conv_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kStemKernel = "gpu.stem_conv";
// At most this many input channels: beyond them the libraries' tiles are no longer mostly
// padding.
constexpr int64_t kMaxChannels = 4;

bool turned_off() {
  const char* v = std::getenv("KILN_GPU_STEM");
  return v && std::string_view(v) == "0";
}

// Empty when the node is a convolution this kernel runs, else why not; fills `out`.
std::string check(const ir::Node& node, ConvNode& out) {
  if (turned_off()) return "KILN_GPU_STEM=0 turns Kiln's stem convolution off";
  if (std::string why = read_conv_node(node, out); !why.empty()) return why;
  if (std::string why = refuse_input_max(out, "the stem kernel"); !why.empty()) return why;
  if (out.groups != 1) return fmt::format("grouped ({} groups)", out.groups);
  if (out.channels > kMaxChannels) {
    return fmt::format("{} input channels (at most {})", out.channels, kMaxChannels);
  }
  if (out.filters % kernels::kStemChannelGroup != 0) {
    return fmt::format("{} filters (a multiple of {} is needed)", out.filters,
                       kernels::kStemChannelGroup);
  }
  const int64_t taps = out.kh * out.kw * out.channels;
  if (taps > kernels::kStemMaxTaps || taps * out.filters > kernels::kStemMaxWeights) {
    return fmt::format("a {}x{}x{} filter of {} outputs is too large for the stem kernel", out.kh,
                       out.kw, out.channels, out.filters);
  }
  if (out.residual) return "a residual input (not supported by the stem kernel)";
  return "";
}

class StemConvKernel final : public Kernel {
 public:
  StemConvKernel(GpuBackendImpl& backend, const ir::Node& node, const ConvNode& shape)
      : backend_(backend),
        shape_(shape),
        label_(node.name()),
        io_(backend, kStemKernel, shape.dtype) {
    // Weights [f, c, kh, kw] widened to float32 and reordered once to [kh, kw, c, f]: a
    // thread's output channels of one tap are then contiguous.
    const Tensor& w = node.input(1)->constant();
    const int64_t f = shape_.filters, c = shape_.channels, kh = shape_.kh, kw = shape_.kw;
    std::vector<float> rscf(static_cast<size_t>(kh * kw * c * f));
    for (int64_t o = 0; o < f; ++o)
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t r = 0; r < kh; ++r)
          for (int64_t s = 0; s < kw; ++s)
            rscf[((r * kw + s) * c + ci) * f + o] =
                constant_element(w, ((o * c + ci) * kh + r) * kw + s);
    weights_ = backend_.upload(rscf.data(), rscf.size() * sizeof(float));
    const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
    if (b) {
      std::vector<float> bias(static_cast<size_t>(f));
      for (int64_t o = 0; o < f; ++o) bias[o] = constant_element(b->constant(), o);
      bias_ = backend_.upload(bias.data(), bias.size() * sizeof(float));
    }
  }

  std::string_view name() const override { return kStemKernel; }
  // The input as the plan has it (read through its strides); the output channels-last.
  BlockedLayouts blocked_layouts() const override { return {.input0 = true, .output0 = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == shape_.dtype && x.dims.size() == 4, ErrorCode::Internal,
               "{} {}: input is {} {}, the kernel was made for 4-D {}", kStemKernel, label_,
               dtype_name(x.dtype), dims_to_string(x.dims), dtype_name(shape_.dtype));
    KILN_CHECK(x.layout.is_row_major() || x.layout.kind == Layout::Kind::ChannelsLast,
               ErrorCode::Internal, "{} {}: a {} input", kStemKernel, label_, x.layout.to_string());
    KILN_CHECK_ARG(x.dims[1] == shape_.channels,
                   "Conv {}: input has {} channels, the weights take {}", label_, x.dims[1],
                   shape_.channels);
    const int64_t n = x.dims[0], c = x.dims[1], h = x.dims[2], w = x.dims[3];
    const ConvExtent extent = conv_extent(shape_, h, w);
    KILN_CHECK_ARG(extent.oh > 0 && extent.ow > 0, "Conv {}: a {}x{} filter does not fit input {}",
                   label_, shape_.kh, shape_.kw, dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, shape_.dtype, {n, shape_.filters, extent.oh, extent.ow});
    if (y.numel() == 0) return;
    // The kernel's coordinates are int32 within an image.
    constexpr int64_t kLimit = int64_t{1} << 31;
    KILN_CHECK_ARG(
        h * w * c < kLimit && extent.oh * extent.ow * shape_.filters < kLimit && n < kLimit,
        "Conv {}: input {} has more than 2^31 elements per image", label_, dims_to_string(x.dims));
    hipStream_t s = gpu_stream(stream).handle();
    kernels::StemConvArgs a;
    a.type = *float_type(shape_.dtype);
    a.x = x.data;
    const bool last = x.layout.kind == Layout::Kind::ChannelsLast;
    a.x_stride_n = h * w * c;
    a.x_stride_c = last ? 1 : h * w;
    a.x_stride_h = last ? w * c : w;
    a.x_stride_w = last ? c : 1;
    a.w = static_cast<const float*>(weights_.data());
    a.bias = bias_ ? static_cast<const float*>(bias_.data()) : nullptr;
    a.y = io_.output(y);
    a.n = static_cast<int>(n), a.h = static_cast<int>(h), a.w_in = static_cast<int>(w);
    a.c = static_cast<int>(c), a.f = static_cast<int>(shape_.filters);
    a.oh = static_cast<int>(extent.oh), a.ow = static_cast<int>(extent.ow);
    a.kh = static_cast<int>(shape_.kh), a.kw = static_cast<int>(shape_.kw);
    a.stride_h = shape_.stride_h, a.stride_w = shape_.stride_w;
    a.dil_h = shape_.dil_h, a.dil_w = shape_.dil_w;
    a.pad_top = static_cast<int>(extent.pads[0]), a.pad_left = static_cast<int>(extent.pads[1]);
    a.activation = shape_.activation;
    a.act_alpha = shape_.act_alpha, a.act_beta = shape_.act_beta;
    if (trace_ && x.dims != traced_) {
      traced_ = x.dims;
      std::fprintf(stderr, "kiln gpu: %s %s %s (%s) -> %s\n", kStemKernel, label_.c_str(),
                   dims_to_string(x.dims).c_str(), x.layout.to_string().c_str(),
                   y.layout.to_string().c_str());
    }
    check_launch(kernels::launch_stem_conv(a, s), kStemKernel);
    io_.finish_output(y, s);
  }

 private:
  GpuBackendImpl& backend_;
  ConvNode shape_;
  std::string label_;
  DeviceBuffer weights_, bias_;
  ChannelsLastIo io_;
  const bool trace_ =
      std::getenv("KILN_GPU_TRACE") != nullptr;  // KILN_GPU_TRACE=1: each shape's plan
  std::vector<int64_t> traced_;
};

// Priority 2: before the depthwise kernel (1, which takes no node this one takes) and cuDNN's
// convolution (gpu.cudnn.conv, 0), which takes the nodes this kernel refuses.
KILN_REGISTER_GPU_CONV_KERNEL(kStemKernel, 2, check, StemConvKernel);

}  // namespace
}  // namespace kiln::backends::gpu
