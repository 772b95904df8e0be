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
#include "backends/gpu/runtime/gemm_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_copy.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"
#include "core/half.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kDepthwiseKernel = "gpu.depthwise_conv";

struct DepthwiseShape {
  int64_t channels = 0, kh = 0, kw = 0;
  int stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  // Explicit pads (top, left, bottom, right) unless auto_pad asks for SAME (computed per input).
  std::vector<int64_t> pads = {0, 0, 0, 0};
  enum class AutoPad { None, SameUpper, SameLower } auto_pad = AutoPad::None;
  kernels::GemmActivation activation = kernels::GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;
  bool residual = false;
  DataType dtype = DataType::Undefined;
};

bool turned_off() {
  const char* v = std::getenv("KILN_GPU_DEPTHWISE");
  return v && std::string_view(v) == "0";
}

// Empty when the node is a depthwise convolution this kernel runs, else why not; fills `out`.
std::string check(const ir::Node& node, DepthwiseShape& out) {
  if (turned_off()) return "KILN_GPU_DEPTHWISE=0 turns Kiln's depthwise convolution off";
  const bool fused = node.domain() == "ai.kiln";
  if (fused) {
    std::string why = read_fused_activation(node, out.activation, out.act_alpha, out.act_beta);
    if (!why.empty()) return why;
  }
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.inputs().size() > 1 ? node.input(1) : nullptr;
  if (!x || !w || !node.output(0)) return "missing operands";
  const TypeInfo& tx = x->type();
  if (!tx.is_tensor() || !float_type(tx.dtype)) {
    return fmt::format("the depthwise convolution takes float32, float16 or bfloat16, not {}",
                       tx.to_string());
  }
  out.dtype = tx.dtype;
  if (!tx.shape || tx.shape->rank() != 4) return "only 2-D (4-D input) depthwise convolutions";
  const Dim& c = tx.shape->dims()[1];
  if (!c.is_static()) return "the input's channel count is not static";
  out.channels = c.value();
  const int64_t group = int_attr(node, "group", 1);
  if (group == 1 || group != out.channels) {
    return fmt::format("not depthwise (group {} for {} input channels)", group, out.channels);
  }
  if (!w->is_constant() || w->constant().dtype() != tx.dtype) {
    return "the depthwise convolution needs constant weights of the input's type";
  }
  const std::vector<int64_t>& wd = w->constant().dims();
  if (wd.size() != 4 || wd[1] != 1 || wd[0] % out.channels != 0) {
    return fmt::format("weights {} do not fit a depthwise convolution of {} channels",
                       dims_to_string(wd), out.channels);
  }
  if (wd[0] != out.channels) {
    return fmt::format("a channel multiplier of {} (only 1 is supported)", wd[0] / out.channels);
  }
  out.kh = wd[2];
  out.kw = wd[3];
  const std::vector<int64_t> kernel_shape = ints_attr(node, "kernel_shape");
  if (!kernel_shape.empty() && kernel_shape != std::vector<int64_t>{out.kh, out.kw}) {
    return "kernel_shape does not match the weights";
  }
  const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (b && (!b->is_constant() || b->constant().dtype() != tx.dtype ||
            b->constant().dims() != std::vector<int64_t>{out.channels})) {
    return "the depthwise convolution needs a constant bias of one value per channel";
  }
  if (std::string why = read_fused_residual(node, tx.dtype, out.residual); !why.empty()) {
    return why;
  }
  const std::vector<int64_t> strides = ints_attr(node, "strides", {1, 1});
  const std::vector<int64_t> dilations = ints_attr(node, "dilations", {1, 1});
  if (strides.size() != 2 || dilations.size() != 2) {
    return "strides or dilations do not match a 2-D convolution";
  }
  for (int64_t v : {strides[0], strides[1], dilations[0], dilations[1]}) {
    if (v < 1 || v > (1 << 16)) return "strides and dilations must be positive";
  }
  out.stride_h = static_cast<int>(strides[0]);
  out.stride_w = static_cast<int>(strides[1]);
  out.dil_h = static_cast<int>(dilations[0]);
  out.dil_w = static_cast<int>(dilations[1]);
  const std::string auto_pad = string_attr(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    out.pads = ints_attr(node, "pads", {0, 0, 0, 0});
    if (out.pads.size() != 4) return "pads do not match a 2-D convolution";
    for (int64_t p : out.pads) {
      if (p < 0 || p > (1 << 16)) return "pads must be non-negative";
    }
  } else if (auto_pad == "SAME_UPPER") {
    out.auto_pad = DepthwiseShape::AutoPad::SameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    out.auto_pad = DepthwiseShape::AutoPad::SameLower;
  } else if (auto_pad != "VALID") {
    return fmt::format("unknown auto_pad '{}'", auto_pad);
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
  DepthwiseKernel(GpuBackendImpl& backend, const ir::Node& node, const DepthwiseShape& shape)
      : backend_(backend),
        shape_(shape),
        label_(node.name()),
        multiprocessors_(backend.device_info().multiprocessors) {
    // Weights widened to float32 and reordered once to [kh, kw, C]: a thread's channels of one
    // tap are then one contiguous load, and no conversion runs per use.
    const Tensor& w = node.input(1)->constant();
    const int64_t c = shape_.channels, taps = shape_.kh * shape_.kw;
    std::vector<float> rsc(static_cast<size_t>(taps * c));
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t t = 0; t < taps; ++t) rsc[t * c + ch] = to_float(w, ch * taps + t);
    }
    weights_ = upload(rsc);
    const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
    if (b) {
      std::vector<float> bias(static_cast<size_t>(c));
      for (int64_t ch = 0; ch < c; ++ch) bias[ch] = to_float(b->constant(), ch);
      bias_ = upload(bias);
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
    int64_t pads[4];
    const int64_t oh = out_extent(h, shape_.kh, shape_.stride_h, shape_.dil_h, 0, pads);
    const int64_t ow = out_extent(w, shape_.kw, shape_.stride_w, shape_.dil_w, 1, pads);
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
    const size_t elem = dtype_size(shape_.dtype);
    const DeviceTensor* z = shape_.residual ? &in[3] : nullptr;
    if (z) {
      KILN_CHECK_ARG(z->dims == y.dims && z->dtype == shape_.dtype,
                     "FusedConv {}: the residual is {}, the result {}", label_,
                     dims_to_string(z->dims), dims_to_string(y.dims));
    }

    kernels::DepthwiseArgs a;
    a.type = *float_type(shape_.dtype);
    a.x = channels_last(x, x_scratch_, s);
    a.z = z ? channels_last(*z, z_scratch_, s) : nullptr;
    const bool y_nhwc = y.layout.kind == Layout::Kind::ChannelsLast;
    if (!y_nhwc) reserve(y_scratch_, static_cast<size_t>(y.numel()) * elem);
    a.y = y_nhwc ? y.data : y_scratch_.data();
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
    a.multiprocessors = multiprocessors_;
    a.vector_bytes = tile_.vector_bytes, a.pixels = tile_.pixels, a.rows = tile_.rows;
    trace(a, x, y);
    check_launch(kernels::launch_depthwise_conv(a, s), kDepthwiseKernel);
    if (!y_nhwc) {
      // Channels-last scratch [N, OH, OW, C] to the row-major output [N, C, OH, OW].
      transpose(y_scratch_.data(), y.data, {n, shape_.channels, oh, ow},
                {oh * ow * shape_.channels, 1, ow * shape_.channels, shape_.channels}, s);
    }
  }

 private:
  static float to_float(const Tensor& t, int64_t i) {
    switch (t.dtype()) {
      case DataType::Float16:
        return half_bits_to_float(static_cast<const uint16_t*>(t.raw_data())[i]);
      case DataType::BFloat16:
        return bfloat16_bits_to_float(static_cast<const uint16_t*>(t.raw_data())[i]);
      default:
        return static_cast<const float*>(t.raw_data())[i];
    }
  }

  DeviceBuffer upload(const std::vector<float>& host) {
    DeviceBuffer buf = backend_.allocate(host.size() * sizeof(float));
    backend_.copy_to_device(buf.data(), host.data(), buf.size(), backend_.compute_stream());
    backend_.compute_stream().synchronize();
    return buf;
  }

  // Output extent along spatial dim `d` (0: H, 1: W) of an input of `in`, and the pads there
  // (pads[d] before, pads[d + 2] after), from the attributes or auto_pad SAME.
  int64_t out_extent(int64_t in, int64_t k, int stride, int dil, int d, int64_t (&pads)[4]) const {
    const int64_t ek = (k - 1) * dil + 1;
    if (shape_.auto_pad == DepthwiseShape::AutoPad::None) {
      pads[d] = shape_.pads[d];
      pads[d + 2] = shape_.pads[d + 2];
      const int64_t span = in + pads[d] + pads[d + 2] - ek;
      return span < 0 ? 0 : span / stride + 1;
    }
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride + ek - in);
    const int64_t small = total / 2;
    pads[d] = shape_.auto_pad == DepthwiseShape::AutoPad::SameUpper ? small : total - small;
    pads[d + 2] = total - pads[d];
    return out;
  }

  void reserve(DeviceBuffer& buf, size_t bytes) {
    if (!buf || buf.size() < bytes) buf = backend_.allocate(bytes);
  }

  // dst (row-major over `dims`) = src read through `src_strides`.
  void transpose(const void* src, void* dst, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& src_strides, hipStream_t s) {
    const int64_t count = shape_numel(dims);
    strided_copy(kDepthwiseKernel, shape_.dtype, src, count, dst, count, dims, src_strides,
                 row_major_strides(dims), s);
  }

  // `t` itself when channels-last, else a channels-last copy in `scratch`.
  const void* channels_last(const DeviceTensor& t, DeviceBuffer& scratch, hipStream_t s) {
    if (t.layout.kind == Layout::Kind::ChannelsLast) return t.data;
    KILN_CHECK(t.layout.is_row_major(), ErrorCode::Internal, "{} {}: a {} operand",
               kDepthwiseKernel, label_, t.layout.to_string());
    const int64_t n = t.dims[0], c = t.dims[1], h = t.dims[2], w = t.dims[3];
    reserve(scratch, static_cast<size_t>(t.numel()) * dtype_size(shape_.dtype));
    // Row-major [N, C, H, W] walked as [N, H, W, C].
    transpose(t.data, scratch.data(), {n, h, w, c}, {c * h * w, w, 1, h * w}, s);
    return scratch.data();
  }

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
  DepthwiseShape shape_;
  std::string label_;
  int multiprocessors_;
  TileOverride tile_;
  DeviceBuffer weights_, bias_, x_scratch_, z_scratch_, y_scratch_;
  std::vector<int64_t> traced_;
};

std::string check_node(const ir::Node& node) {
  DepthwiseShape shape;
  return check(node, shape);
}

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  DepthwiseShape shape;
  check(node, shape);  // the table's create ran the check before
  return std::make_unique<DepthwiseKernel>(static_cast<GpuBackendImpl&>(backend), node, shape);
}

// Priority 1: before cuDNN's convolution (gpu.cudnn.conv, priority 0), which takes the nodes
// this kernel refuses (and every one with KILN_GPU_DEPTHWISE=0).
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Conv",
                      .name = kDepthwiseKernel,
                      .priority = 1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedConv",
                      .name = kDepthwiseKernel,
                      .priority = 1,
                      .check = check_node,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
