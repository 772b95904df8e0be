// Depthwise Conv and ai.kiln FusedConv (group == C_in == C_out, 2-D) through Kiln's own kernel
// (kernels/depthwise_conv.hip): before cuDNN, whose depthwise convolutions ran MobileNetV2 at
// 5.2x PyTorch's time on the H200, and on AMD, where ROCm 5.2 has no MIOpen, instead of the CPU.
// float32, float16, bfloat16; any filter, strides, dilations, pads (asymmetric and auto_pad
// too); bias, a residual Z and every fused activation in the epilogue. The kernel reads and
// writes channels-last; a row-major input, residual or output (a graph's edge) is transposed
// through scratch. KILN_GPU_DEPTHWISE=0 refuses every node, so cuDNN takes them again.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backends/gpu/kernels/depthwise_conv.hpp"
#include "backends/gpu/runtime/channels_last_io.hpp"
#include "backends/gpu/runtime/conv_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kDepthwiseKernel = "gpu.depthwise_conv";

bool turned_off() {
  const char* v = std::getenv("KILN_GPU_DEPTHWISE");
  return v && std::string_view(v) == "0";
}

// Empty when the node is a depthwise convolution this kernel runs, else why not; fills `out`.
std::string check(const ir::Node& node, ConvNode& out) {
  if (turned_off()) return "KILN_GPU_DEPTHWISE=0 turns Kiln's depthwise convolution off";
  if (std::string why = read_conv_node(node, out); !why.empty()) return why;
  if (out.groups == 1 || out.groups != out.channels) {
    return fmt::format("not depthwise (group {} for {} input channels)", out.groups, out.channels);
  }
  if (out.filters != out.channels) {
    return fmt::format("a channel multiplier of {} (only 1 is supported)",
                       out.filters / out.channels);
  }
  return "";
}

// Tuning override for experiments and the benchmark: KILN_GPU_DW_TILE="BYTES,PIXELS[,ROWS]"
// (bytes of channels per thread load: 8 or 16; output pixels per thread along W: 2 or 4; output
// rows per thread along H: 1, 2 or 4; 0 or absent leaves the launcher's choice), read when a
// kernel is made.
struct TileOverride {
  int vector_bytes = 0, pixels = 0, rows = 0;
};
TileOverride read_tile_override() {
  TileOverride t;
  const char* v = std::getenv("KILN_GPU_DW_TILE");
  if (v && std::sscanf(v, "%d,%d,%d", &t.vector_bytes, &t.pixels, &t.rows) < 2) t = {};
  return t;
}

class DepthwiseKernel final : public Kernel {
 public:
  DepthwiseKernel(GpuBackendImpl& backend, const ir::Node& node, const ConvNode& shape)
      : backend_(backend),
        shape_(shape),
        label_(node.name()),
        multiprocessors_(backend.device_info().multiprocessors),
        io_(backend, kDepthwiseKernel, shape.dtype) {
    // Weights widened to float32 and reordered once to [kh, kw, C]: a thread's channels of one
    // tap are then one contiguous load, and no conversion runs per use.
    const Tensor& w = node.input(1)->constant();
    const int64_t c = shape_.channels, taps = shape_.kh * shape_.kw;
    std::vector<float> rsc(static_cast<size_t>(taps * c));
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t t = 0; t < taps; ++t) rsc[t * c + ch] = constant_element(w, ch * taps + t);
    }
    weights_ = backend_.upload(rsc.data(), rsc.size() * sizeof(float));
    const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
    if (b) {
      std::vector<float> bias(static_cast<size_t>(c));
      for (int64_t ch = 0; ch < c; ++ch) bias[ch] = constant_element(b->constant(), ch);
      bias_ = backend_.upload(bias.data(), bias.size() * sizeof(float));
    }
    tile_ = read_tile_override();
  }

  std::string_view name() const override { return kDepthwiseKernel; }
  // Input and output channels-last independently; a residual shares the output's layout.
  BlockedLayouts blocked_layouts() const override {
    return {.input0 = true, .output0 = true, .follows = shape_.residual ? 3 : -1};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == shape_.dtype && x.dims.size() == 4, ErrorCode::Internal,
               "{} {}: input is {} {}, the kernel was made for 4-D {}", kDepthwiseKernel, label_,
               dtype_name(x.dtype), dims_to_string(x.dims), dtype_name(shape_.dtype));
    KILN_CHECK_ARG(x.dims[1] == shape_.channels,
                   "Conv {}: input has {} channels, the depthwise weights take {}", label_,
                   x.dims[1], shape_.channels);
    const int64_t n = x.dims[0], h = x.dims[2], w = x.dims[3];
    const ConvExtent extent = conv_extent(shape_, h, w);
    const int64_t oh = extent.oh, ow = extent.ow;
    const int64_t* pads = extent.pads;
    KILN_CHECK_ARG(oh > 0 && ow > 0, "Conv {}: a {}x{} filter does not fit input {}", label_,
                   shape_.kh, shape_.kw, dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, shape_.dtype, {n, shape_.channels, oh, ow});
    if (y.numel() == 0) return;
    // The kernels index within one image in int32 (the batch may be any size).
    constexpr int64_t kImageLimit = int64_t{1} << 31;
    KILN_CHECK_ARG(h * w * shape_.channels < kImageLimit &&
                       oh * ow * shape_.channels < kImageLimit && n < kImageLimit,
                   "Conv {}: input {} has more than 2^31 elements per image", label_,
                   dims_to_string(x.dims));
    hipStream_t s = gpu_stream(stream).handle();
    const DeviceTensor* z = shape_.residual ? &in[3] : nullptr;
    if (z) {
      KILN_CHECK_ARG(z->dims == y.dims && z->dtype == shape_.dtype,
                     "FusedConv {}: the residual is {}, the result {}", label_,
                     dims_to_string(z->dims), dims_to_string(y.dims));
    }

    kernels::DepthwiseArgs a;
    a.type = *float_type(shape_.dtype);
    a.x = io_.input(x, s);
    a.z = z ? io_.residual(*z, s) : nullptr;
    a.y = io_.output(y);
    a.w = static_cast<const float*>(weights_.data());
    a.bias = bias_ ? static_cast<const float*>(bias_.data()) : nullptr;
    a.n = static_cast<int>(n), a.h = static_cast<int>(h), a.w_in = static_cast<int>(w);
    a.c = static_cast<int>(shape_.channels);
    a.oh = static_cast<int>(oh), a.ow = static_cast<int>(ow);
    a.kh = static_cast<int>(shape_.kh), a.kw = static_cast<int>(shape_.kw);
    a.stride_h = shape_.stride_h, a.stride_w = shape_.stride_w;
    a.dil_h = shape_.dil_h, a.dil_w = shape_.dil_w;
    a.pad_top = static_cast<int>(pads[0]), a.pad_left = static_cast<int>(pads[1]);
    a.activation = shape_.activation;
    a.act_alpha = shape_.act_alpha, a.act_beta = shape_.act_beta;
    a.input_max = shape_.input_max;
    a.multiprocessors = multiprocessors_;
    a.vector_bytes = tile_.vector_bytes, a.pixels = tile_.pixels, a.rows = tile_.rows;
    trace(a, x, y);
    check_launch(kernels::launch_depthwise_conv(a, s), kDepthwiseKernel);
    io_.finish_output(y, s);
  }

 private:
  // KILN_GPU_TRACE=1: the plan for each new input shape.
  void trace(const kernels::DepthwiseArgs& a, const DeviceTensor& x, const DeviceTensor& y) {
    if (!std::getenv("KILN_GPU_TRACE") || x.dims == traced_) return;
    traced_ = x.dims;
    const kernels::DepthwisePlan p = kernels::depthwise_plan(a);
    std::fprintf(stderr, "kiln gpu: %s %s %s (%s) -> %s: %s %lldx%lld s%dx%d d%dx%d v%d p%d q%d\n",
                 kDepthwiseKernel, label_.c_str(), dims_to_string(x.dims).c_str(),
                 x.layout.to_string().c_str(), y.layout.to_string().c_str(),
                 p.tiled ? "tiled" : "generic", static_cast<long long>(shape_.kh),
                 static_cast<long long>(shape_.kw), a.stride_h, a.stride_w, a.dil_h, a.dil_w, p.vec,
                 p.pixels, p.rows);
  }

  GpuBackendImpl& backend_;
  ConvNode shape_;
  std::string label_;
  int multiprocessors_;
  TileOverride tile_;
  DeviceBuffer weights_, bias_;
  ChannelsLastIo io_;
  std::vector<int64_t> traced_;
};

// Priority 1: before cuDNN's convolution (gpu.cudnn.conv, priority 0), which takes the nodes
// this kernel refuses (and every one with KILN_GPU_DEPTHWISE=0).
KILN_REGISTER_GPU_CONV_KERNEL(kDepthwiseKernel, 1, check, DepthwiseKernel);

}  // namespace
}  // namespace kiln::backends::gpu
