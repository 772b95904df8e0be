// Conv and ai.kiln FusedConv through Kiln's own GEMM as an implicit-GEMM convolution
// (kernels/gemm.hip with GemmArgs::conv_a: the im2col matrix is never written, each block
// stages its tile of it straight from the channels-last input): float32 and float16
// (accumulated in float32), ungrouped, any filter, strides, dilations, pads (asymmetric and
// auto_pad too); bias, a residual Z and every fused activation in the epilogue. Pointwise
// convolutions run as plain products; channels that are not a 16-byte chunk are padded. On AMD it
// is the convolution (ROCm 5.2 has no MIOpen); on NVIDIA it comes after cuDNN (gpu.cudnn.conv)
// unless KILN_GPU_OWN_KERNELS prefers Kiln's own kernels. Depthwise convolutions have a kernel of
// their own (gpu.depthwise_conv); other grouped ones are refused here.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/runtime/channels_last_io.hpp"
#include "backends/gpu/runtime/conv_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kOwnConvKernel = "gpu.own.conv";

// The launcher's implicit A indexes one image, and the reduction, in 32 bits.
constexpr int64_t kIndexLimit = int64_t{1} << 31;

std::string check(const ir::Node& node, ConvNode& out) {
  if (std::string why = read_conv_node(node, out); !why.empty()) return why;
  if (std::string why = refuse_input_max(out, "Kiln's own convolution"); !why.empty()) return why;
  if (out.dtype != DataType::Float32 && out.dtype != DataType::Float16) {
    return fmt::format("Kiln's own convolution takes float32 or float16, not {}",
                       dtype_name(out.dtype));
  }
  if (out.groups != 1) {
    return fmt::format(
        "Kiln's own convolution does not take grouped convolutions yet (group {}; depthwise ones "
        "have their own kernel)",
        out.groups);
  }
  if (out.kh * out.kw * out.channels >= kIndexLimit) {
    return "the convolution's reduction (filter taps x channels) exceeds 2^31";
  }
  return "";
}

class OwnConvKernel final : public Kernel {
 public:
  OwnConvKernel(GpuBackendImpl& backend, const ir::Node& node, const ConvNode& shape)
      : backend_(backend),
        shape_(shape),
        label_(node.name()),
        matrix_tiles_(has_matrix_tiles(backend.device_info())),
        wgmma_(has_wgmma(backend.device_info())),
        multiprocessors_(backend.device_info().multiprocessors),
        io_(backend, kOwnConvKernel, shape.dtype) {
    // Channels padded with zeros to a 16-byte chunk where they are not one (a network's
    // 3-channel first layer): the staging then copies 16 bytes a chunk instead of an element at
    // a time (the padded reduction costs matrix instructions, which are cheap, not loads).
    const size_t elem = dtype_size(shape_.dtype);
    const int64_t chunk = static_cast<int64_t>(16 / elem);
    padded_channels_ = (shape_.channels + chunk - 1) / chunk * chunk;
    // The filters as B [filters][kh][kw][c] (the reduction's (r, s, c) order), reordered once.
    const Tensor& w = node.input(1)->constant();
    const int64_t f = shape_.filters, c = shape_.channels, cp = padded_channels_;
    const int64_t taps = shape_.kh * shape_.kw;
    std::vector<uint8_t> frsc(static_cast<size_t>(f * taps * cp) * elem, 0);
    const auto* src = static_cast<const uint8_t*>(w.raw_data());
    for (int64_t k = 0; k < f; ++k) {
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t t = 0; t < taps; ++t) {
          std::copy_n(src + ((k * c + ch) * taps + t) * elem, elem,
                      frsc.data() + ((k * taps + t) * cp + ch) * elem);
        }
      }
    }
    weights_ = backend_.upload(frsc.data(), frsc.size());
    if (shape_.bias) {
      const Tensor& b = node.input(2)->constant();
      bias_ = backend_.upload(b.raw_data(), b.nbytes());
    }
    if (const char* tile = std::getenv("KILN_GPU_GEMM_TILE")) tile_ = tile;
    trace_ = std::getenv("KILN_GPU_TRACE") != nullptr;
    // Split-K's partials for an input shape known now (allocated here, not in a run, which may
    // be captured into a graph); run-time shapes do not split.
    const TypeInfo& tx = node.input(0)->type();
    if (tx.shape && tx.shape->is_static()) {
      const std::vector<int64_t> dims = tx.shape->values();
      const ConvExtent e = conv_extent(shape_, dims[2], dims[3]);
      if (e.oh > 0 && e.ow > 0) {
        const int64_t floats =
            kernels::gemm_partial_floats(args_for(dims[0], dims[2], dims[3], e, nullptr));
        if (floats > 0) {
          partials_ = backend.allocate(static_cast<size_t>(floats) * sizeof(float));
          partial_capacity_ = floats;
        }
      }
    }
  }

  std::string_view name() const override { return kOwnConvKernel; }
  // Input and output channels-last independently; a residual shares the output's layout.
  BlockedLayouts blocked_layouts() const override {
    return {.input0 = true, .output0 = true, .follows = shape_.residual ? 3 : -1};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == shape_.dtype && x.dims.size() == 4, ErrorCode::Internal,
               "{} {}: input is {} {}, the kernel was made for 4-D {}", kOwnConvKernel, label_,
               dtype_name(x.dtype), dims_to_string(x.dims), dtype_name(shape_.dtype));
    KILN_CHECK_ARG(x.dims[1] == shape_.channels,
                   "Conv {}: input has {} channels, the weights take {}", label_, x.dims[1],
                   shape_.channels);
    const int64_t n = x.dims[0], h = x.dims[2], w = x.dims[3];
    const ConvExtent e = conv_extent(shape_, h, w);
    KILN_CHECK_ARG(e.oh > 0 && e.ow > 0, "Conv {}: a {}x{} filter does not fit input {}", label_,
                   shape_.kh, shape_.kw, dims_to_string(x.dims));
    KILN_CHECK_ARG(h * w * padded_channels_ < kIndexLimit,
                   "Conv {}: input {} has 2^31 elements or more per image", label_,
                   dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, shape_.dtype, {n, shape_.filters, e.oh, e.ow});
    if (y.numel() == 0) return;
    const DeviceTensor* z = shape_.residual ? &in[3] : nullptr;
    if (z) {
      KILN_CHECK_ARG(z->dims == y.dims && z->dtype == shape_.dtype,
                     "FusedConv {}: the residual is {}, the result {}", label_,
                     dims_to_string(z->dims), dims_to_string(y.dims));
    }
    hipStream_t s = gpu_stream(stream).handle();
    kernels::GemmArgs args = args_for(n, h, w, e, &y);
    args.a = padded_channels_ != shape_.channels ? io_.input_padded(x, padded_channels_, s)
                                                 : io_.input(x, s);
    args.y = io_.output(y);
    if (z) {
      // Z is [pixels][filters] channels-last, as Y: a full C.
      args.c = io_.residual(*z, s);
      args.beta = 1.f;
      args.c_row_stride = shape_.filters;
      args.c_col_stride = 1;
    }
    if (trace_ && x.dims != traced_) {
      traced_ = x.dims;
      std::fprintf(stderr,
                   "kiln gpu: %s %s %s (%s) -> %s: M %lld N %lld K %lld: tile %s, %d part(s) of "
                   "K\n",
                   kOwnConvKernel, label_.c_str(), dims_to_string(x.dims).c_str(),
                   x.layout.to_string().c_str(), y.layout.to_string().c_str(),
                   static_cast<long long>(args.m), static_cast<long long>(args.n),
                   static_cast<long long>(args.k), kernels::gemm_tile_name(args),
                   kernels::gemm_splits(args));
    }
    check_launch(kernels::launch_gemm(args, s), kOwnConvKernel);
    io_.finish_output(y, s);
  }

 private:
  // Everything of a run's launch but the input, the output and the residual.
  kernels::GemmArgs args_for(int64_t n, int64_t h, int64_t w, const ConvExtent& e,
                             const DeviceTensor* y) const {
    kernels::GemmArgs args;
    args.type = *float_type(shape_.dtype);
    args.y = y ? y->data : nullptr;
    args.m = n * e.oh * e.ow;
    args.n = shape_.filters;
    args.k = shape_.kh * shape_.kw * padded_channels_;
    args.trans_b = true;
    args.b = weights_.data();
    args.bias = shape_.bias ? bias_.data() : nullptr;
    // A pointwise convolution (1x1, stride 1, no pads) is a plain product of the channels-last
    // input [N H W, C] by the filters: the GEMM's own staging, no window to decode.
    const bool pointwise = shape_.kh == 1 && shape_.kw == 1 && shape_.stride_h == 1 &&
                           shape_.stride_w == 1 && e.oh == h && e.ow == w && e.pads[0] == 0 &&
                           e.pads[1] == 0;
    args.conv_a = !pointwise;
    args.conv = {.h = h,
                 .w = w,
                 .c = padded_channels_,
                 .oh = e.oh,
                 .ow = e.ow,
                 .r = static_cast<int>(shape_.kh),
                 .s = static_cast<int>(shape_.kw),
                 .stride_h = shape_.stride_h,
                 .stride_w = shape_.stride_w,
                 .pad_top = static_cast<int>(e.pads[0]),
                 .pad_left = static_cast<int>(e.pads[1]),
                 .dil_h = shape_.dil_h,
                 .dil_w = shape_.dil_w};
    args.activation = shape_.activation;
    args.act_alpha = shape_.act_alpha, args.act_beta = shape_.act_beta;
    args.matrix_tiles = matrix_tiles_;
    args.wgmma = wgmma_;
    args.multiprocessors = multiprocessors_;
    args.tile = tile_.c_str();
    args.partials = partial_capacity_ > 0 ? static_cast<float*>(partials_.data()) : nullptr;
    args.partial_capacity = partial_capacity_;
    return args;
  }

  GpuBackendImpl& backend_;
  ConvNode shape_;
  std::string label_;
  bool matrix_tiles_;
  bool wgmma_;
  int multiprocessors_;
  ChannelsLastIo io_;
  int64_t padded_channels_ = 0;  // the input's channels, padded to a 16-byte chunk
  DeviceBuffer weights_, bias_;
  std::string tile_;
  bool trace_ = false;
  std::vector<int64_t> traced_;  // the input dims last traced (KILN_GPU_TRACE)
  DeviceBuffer partials_;        // split-K's, for the node's static shape (none: no split)
  int64_t partial_capacity_ = 0;
};

// Priority -1: after cuDNN's convolution (gpu.cudnn.conv) where there is one, unless the
// backend's KernelPreference puts Kiln's own kernels first; after the depthwise kernel (1).
KILN_REGISTER_GPU_CONV_KERNEL(kOwnConvKernel, -1, check, OwnConvKernel);

}  // namespace

std::unique_ptr<Kernel> make_own_conv_kernel(GpuBackendImpl& backend, const ir::Node& node) {
  ConvNode shape;
  if (!check(node, shape).empty()) return nullptr;
  return std::make_unique<OwnConvKernel>(backend, node, shape);
}
}  // namespace kiln::backends::gpu
