// Conv and Kiln's FusedConv (bias, a residual Z, then Relu or nothing) on the GPU through cuDNN 9
// (NVIDIA; MIOpen would serve AMD where ROCm has it, and Debian's ROCm 5.2 has none): 2-D, float32
// (FMA math: no TF32, so results stay within float32 rounding of the reference) and float16
// (tensor cores, accumulated in float32), groups (depthwise included), strides, dilations,
// symmetric pads. Activations are channels-last (NHWC, the layout cuDNN's tensor-core kernels
// read and write) wherever the plan can keep them so; a row-major input or output is transformed
// by cuDNN into the kernel's own scratch. The algorithm is the fastest cudnnFind measures on the
// device at the first run of each input shape (a tactic timed on the real device); a float16
// convolution also times cuBLASLt's product (1x1) and Kiln's own implicit GEMM, which fuses every
// activation, against cuDNN's whole call (its bias, residual and activation passes included).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/graph.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>
#include <vector>

#include "backends/gpu/runtime/conv_gemm.hpp"
#include "backends/gpu/runtime/conv_node.hpp"
#include "backends/gpu/runtime/cudnn_api.hpp"
#include "backends/gpu/runtime/gemm_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/kernel_table.hpp"
#include "core/dtype.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kConvKernel = "gpu.cudnn.conv";

struct ConvShape {
  bool relu = false;  // in cuDNN's fused call (or cuBLASLt's epilogue)
  // Any other activation, applied after the sums by cudnnActivationForward.
  bool post = false;
  cudnnActivationMode_t post_mode = CUDNN_ACTIVATION_IDENTITY;
  double post_coef = 0;
  bool residual = false;  // FusedConv's Z: added before the activation
  int64_t groups = 1;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
};

// Empty when the node can run here, else why not; fills `out`.
std::string check(const ir::Node& node, ConvShape& out) {
  const bool fused = node.domain() == "ai.kiln";
  if (fused) {
    const std::string act = string_attr(node, "activation", "None");
    const std::vector<float> params = floats_attr(node, "activation_params");
    if (act == "Relu") {
      out.relu = true;
    } else if (act == "Clip" && params.size() == 2 && params[0] == 0.f) {
      out.post = true;  // ReLU6 and its kind: cuDNN's clipped ReLU
      out.post_mode = CUDNN_ACTIVATION_CLIPPED_RELU;
      out.post_coef = params[1];
    } else if (act == "Sigmoid" || act == "Tanh" || act == "Silu") {
      out.post = true;
      out.post_mode = act == "Sigmoid" ? CUDNN_ACTIVATION_SIGMOID
                      : act == "Tanh"  ? CUDNN_ACTIVATION_TANH
                                       : CUDNN_ACTIVATION_SWISH;
    } else if (act != "None") {
      return fmt::format(
          "FusedConv with a fused {} is not supported on the GPU yet (Relu, Clip(0, max), "
          "Sigmoid, Tanh and Silu are)",
          act);
    }
  }
  if (node.attribute("input_max")) {
    return "cuDNN's convolution does not clip its input (FusedConv's input_max): the depthwise "
           "kernel does";
  }
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.inputs().size() > 1 ? node.input(1) : nullptr;
  if (!x || !w || !node.output(0)) return "missing operands";
  const TypeInfo& tx = x->type();
  if (!tx.is_tensor() || (tx.dtype != DataType::Float32 && tx.dtype != DataType::Float16)) {
    return fmt::format("Conv on the GPU takes float32 or float16, not {}", tx.to_string());
  }
  if (!tx.shape || tx.shape->rank() != 4) {
    return "only 2-D convolutions (4-D inputs) run on the GPU so far";
  }
  if (!w->is_constant() || w->constant().dtype() != tx.dtype || w->constant().dims().size() != 4) {
    return "Conv on the GPU needs constant 4-D weights of the input's type";
  }
  const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (b &&
      (!b->is_constant() || b->constant().dtype() != tx.dtype || b->constant().dims().size() != 1 ||
       b->constant().dims()[0] != w->constant().dims()[0])) {
    return "Conv on the GPU needs a constant bias of one value per output channel";
  }
  if (std::string why = read_fused_residual(node, tx.dtype, out.residual); !why.empty()) {
    return why;
  }
  const std::string auto_pad = string_attr(node, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    return fmt::format("Conv with auto_pad {} is not supported on the GPU yet", auto_pad);
  }
  std::vector<int64_t> pads = ints_attr(node, "pads", {0, 0, 0, 0});
  if (auto_pad == "VALID") pads = {0, 0, 0, 0};
  const std::vector<int64_t> strides = ints_attr(node, "strides", {1, 1});
  const std::vector<int64_t> dilations = ints_attr(node, "dilations", {1, 1});
  if (pads.size() != 4 || strides.size() != 2 || dilations.size() != 2) {
    return "Conv's pads, strides or dilations do not match a 2-D convolution";
  }
  if (pads[0] != pads[2] || pads[1] != pads[3]) {
    return "Conv with asymmetric pads is not supported on the GPU yet";
  }
  out.groups = int_attr(node, "group", 1);
  const int64_t k = w->constant().dims()[0];
  if (out.groups < 1 || k % out.groups != 0) return "Conv's group does not divide its filters";
  out.pad_h = static_cast<int>(pads[0]);
  out.pad_w = static_cast<int>(pads[1]);
  out.stride_h = static_cast<int>(strides[0]);
  out.stride_w = static_cast<int>(strides[1]);
  out.dil_h = static_cast<int>(dilations[0]);
  out.dil_w = static_cast<int>(dilations[1]);
  return "";
}

cudnnDataType_t cudnn_type(DataType t) {
  return t == DataType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// A cuDNN descriptor, destroyed with its owner.
template <typename T, auto Destroy>
class Desc {
 public:
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d_) (cudnn().*Destroy)(d_);
  }
  T& out() { return d_; }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc = Desc<cudnnTensorDescriptor_t, &CudnnApi::tensor_destroy>;
using FilterDesc = Desc<cudnnFilterDescriptor_t, &CudnnApi::filter_destroy>;
using ConvDesc = Desc<cudnnConvolutionDescriptor_t, &CudnnApi::conv_destroy>;
using ActDesc = Desc<cudnnActivationDescriptor_t, &CudnnApi::act_destroy>;

class ConvKernel final : public Kernel {
 public:
  ConvKernel(GpuBackendImpl& backend, const ir::Node& node, const ConvShape& shape)
      : backend_(backend), shape_(shape), dtype_(node.input(0)->type().dtype), label_(node.name()) {
    const CudnnApi& dnn = cudnn();
    const Tensor& w = node.input(1)->constant();
    k_ = w.dims()[0];
    c_per_group_ = w.dims()[1];
    r_ = w.dims()[2];
    s_ = w.dims()[3];
    // cuDNN's channels-last filters are [K, R, S, C]: the constant is reordered once, here.
    const size_t elem = dtype_size(dtype_);
    std::vector<uint8_t> krsc(w.nbytes());
    const auto* src = static_cast<const uint8_t*>(w.raw_data());
    for (int64_t k = 0; k < k_; ++k)
      for (int64_t c = 0; c < c_per_group_; ++c)
        for (int64_t r = 0; r < r_; ++r)
          for (int64_t s = 0; s < s_; ++s) {
            const int64_t from = ((k * c_per_group_ + c) * r_ + r) * s_ + s;
            const int64_t to = ((k * r_ + r) * s_ + s) * c_per_group_ + c;
            std::copy_n(src + from * elem, elem, krsc.data() + to * elem);
          }
    weights_ = backend_.upload(krsc.data(), krsc.size());
    const ir::Value* b = node.inputs().size() > 2 ? node.input(2) : nullptr;
    if (b) {
      bias_ = backend_.upload(b->constant().raw_data(), b->constant().nbytes());
    } else {
      // cudnnConvolutionBiasActivationForward always adds a bias: zeros here.
      std::vector<uint8_t> zeros(static_cast<size_t>(k_) * elem, 0);
      bias_ = backend_.upload(zeros.data(), zeros.size());
    }
    has_bias_ = b != nullptr;
    cudnn_check(dnn.filter_create(&filter_.out()), "cudnnCreateFilterDescriptor");
    cudnn_check(dnn.filter_set_4d(filter_.get(), cudnn_type(dtype_), CUDNN_TENSOR_NHWC,
                                  static_cast<int>(k_), static_cast<int>(c_per_group_),
                                  static_cast<int>(r_), static_cast<int>(s_)),
                "cudnnSetFilter4dDescriptor");
    cudnn_check(dnn.conv_create(&conv_.out()), "cudnnCreateConvolutionDescriptor");
    cudnn_check(
        dnn.conv_set_2d(conv_.get(), shape_.pad_h, shape_.pad_w, shape_.stride_h, shape_.stride_w,
                        shape_.dil_h, shape_.dil_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolution2dDescriptor");
    cudnn_check(dnn.conv_set_groups(conv_.get(), static_cast<int>(shape_.groups)),
                "cudnnSetConvolutionGroupCount");
    // float32 stays float32 (no TF32: FMA kernels only); float16 uses tensor cores.
    cudnn_check(dnn.conv_set_math(conv_.get(), dtype_ == DataType::Float16 ? CUDNN_TENSOR_OP_MATH
                                                                           : CUDNN_FMA_MATH),
                "cudnnSetConvolutionMathType");
    cudnn_check(dnn.act_create(&act_.out()), "cudnnCreateActivationDescriptor");
    cudnn_check(dnn.act_set(act_.get(), CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
                "cudnnSetActivationDescriptor");
    cudnn_check(dnn.act_create(&identity_.out()), "cudnnCreateActivationDescriptor");
    cudnn_check(
        dnn.act_set(identity_.get(), CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0),
        "cudnnSetActivationDescriptor");
    if (shape_.post) {
      cudnn_check(dnn.act_create(&post_act_.out()), "cudnnCreateActivationDescriptor");
      cudnn_check(
          dnn.act_set(post_act_.get(), shape_.post_mode, CUDNN_PROPAGATE_NAN, shape_.post_coef),
          "cudnnSetActivationDescriptor");
      if (shape_.post_mode == CUDNN_ACTIVATION_SWISH) {
        // Silu is x * sigmoid(x): swish with beta 1.
        cudnn_check(dnn.act_set_swish_beta(post_act_.get(), 1.0),
                    "cudnnSetActivationDescriptorSwishBeta");
      }
    }
    cudnn_check(dnn.tensor_create(&bias_desc_.out()), "cudnnCreateTensorDescriptor");
    cudnn_check(dnn.tensor_set_4d(bias_desc_.get(), CUDNN_TENSOR_NCHW, cudnn_type(dtype_), 1,
                                  static_cast<int>(k_), 1, 1),
                "cudnnSetTensor4dDescriptor");
    for (TensorDesc* d : {&x_desc_, &y_desc_, &x_plain_, &y_plain_}) {
      cudnn_check(dnn.tensor_create(&d->out()), "cudnnCreateTensorDescriptor");
    }
    // Opt-in until it has won on a device: its first measurement (2026-12-06, fifth session)
    // timed cuDNN on the wrong stream.
    const char* own = std::getenv("KILN_GPU_CONV_OWN");
    if (dtype_ == DataType::Float16 && own && std::string_view(own) == "1") {
      own_ = make_own_conv_kernel(backend, node);  // null where it refuses the node
    }
  }

  std::string_view name() const override { return kConvKernel; }
  // Input and output independently channels-last; a residual shares the output's layout.
  BlockedLayouts blocked_layouts() const override {
    return {.input0 = true, .output0 = true, .follows = shape_.residual ? 3 : -1};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const CudnnApi& dnn = cudnn();
    std::lock_guard<std::mutex> lock(cudnn_mutex());
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == dtype_ && x.dims.size() == 4, ErrorCode::Internal,
               "{} {}: input is {} {}, the kernel was made for 4-D {}", kConvKernel, label_,
               dtype_name(x.dtype), dims_to_string(x.dims), dtype_name(dtype_));
    KILN_CHECK_ARG(x.dims[1] == c_per_group_ * shape_.groups,
                   "Conv {}: input has {} channels, the weights take {} x {} groups", label_,
                   x.dims[1], c_per_group_, shape_.groups);
    const int64_t n = x.dims[0], h = x.dims[2], w = x.dims[3];
    const int64_t oh = (h + 2 * shape_.pad_h - shape_.dil_h * (r_ - 1) - 1) / shape_.stride_h + 1;
    const int64_t ow = (w + 2 * shape_.pad_w - shape_.dil_w * (s_ - 1) - 1) / shape_.stride_w + 1;
    KILN_CHECK_ARG(oh > 0 && ow > 0, "Conv {}: a {}x{} filter does not fit input {}", label_, r_,
                   s_, dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, dtype_, {n, k_, oh, ow});
    if (y.numel() == 0) return;
    GpuStream& s = gpu_stream(stream);
    cudnn_check(dnn.set_stream(dnn.handle, s.handle()), "cudnnSetStream");
    const bool x_nhwc = x.layout.kind == Layout::Kind::ChannelsLast;
    const bool y_nhwc = y.layout.kind == Layout::Kind::ChannelsLast;
    // The candidates are timed on the stream the run queues on (cuDNN's handle is set to it):
    // an executor's stream, not necessarily the backend's compute stream.
    timing_stream_ = &stream;
    prepare(x, y, x_nhwc, y_nhwc);
    if (use_own_) {
      SameOutput same(y);
      own_->run(in, same, stream);
      return;
    }
    const void* xp = x.data;
    if (!x_nhwc) {
      const float one = 1.f, zero = 0.f;
      cudnn_check(dnn.transform(dnn.handle, &one, x_plain_.get(), x.data, &zero, x_desc_.get(),
                                x_scratch_.data()),
                  "cudnnTransformTensor (input to channels-last)");
      xp = x_scratch_.data();
    }
    void* yp = y_nhwc ? y.data : y_scratch_.data();
    if (use_gemm_) {
      // Planned only when input, output (and so the residual) are channels-last.
      gemm_.run(x.data, weights_.data(), has_bias_ ? bias_.data() : nullptr,
                shape_.residual ? in[3].data : nullptr, y.data, gemm_workspace_.data(), s.handle());
      post_activation(y.data);
      return;
    }
    const void* zp = nullptr;
    if (shape_.residual) {
      const DeviceTensor& z = in[3];
      KILN_CHECK_ARG(z.dims == y.dims, "FusedConv {}: the residual is {}, the result {}", label_,
                     dims_to_string(z.dims), dims_to_string(y.dims));
      zp = z.data;
      if (z.layout.kind != Layout::Kind::ChannelsLast) {
        if (!z_scratch_ || z_scratch_.size() < y.nbytes()) {
          z_scratch_ = backend_.allocate(static_cast<size_t>(y.numel()) * dtype_size(dtype_));
        }
        const float one = 1.f, zero = 0.f;
        cudnn_check(dnn.transform(dnn.handle, &one, y_plain_.get(), z.data, &zero, y_desc_.get(),
                                  z_scratch_.data()),
                    "cudnnTransformTensor (residual to channels-last)");
        zp = z_scratch_.data();
      }
    }
    convolve(xp, yp, zp);
    if (!y_nhwc) {
      const float one = 1.f, zero = 0.f;
      cudnn_check(dnn.transform(dnn.handle, &one, y_desc_.get(), yp, &zero, y_plain_.get(), y.data),
                  "cudnnTransformTensor (output to row-major)");
    }
  }

 private:
  // y = act(conv(x) + bias [+ z]), all channels-last.
  void convolve(const void* xp, void* yp, const void* zp) {
    const CudnnApi& dnn = cudnn();
    const float one = 1.f, zero = 0.f;
    if ((shape_.relu || fused_identity_) && !unfused_) {
      // act(conv(x) + alpha2 * z + bias) in one call, rounded once; without a residual z is y
      // itself, times 0 (cuDNN requires one).
      const cudnnStatus_t status = dnn.forward_bias_act(
          dnn.handle, &one, x_desc_.get(), xp, filter_.get(), weights_.data(), conv_.get(), algo_,
          workspace_.data(), workspace_.size(), zp ? &one : &zero, y_desc_.get(), zp ? zp : yp,
          bias_desc_.get(), bias_.data(), shape_.relu ? act_.get() : identity_.get(), y_desc_.get(),
          yp);
      if (status == CUDNN_STATUS_SUCCESS) {
        post_activation(yp);
        return;
      }
      if (status != CUDNN_STATUS_BAD_PARAM && status != CUDNN_STATUS_NOT_SUPPORTED) {
        cudnn_check(status, "cudnnConvolutionBiasActivationForward");
      }
      // cuDNN refuses the fused call for the algorithm cudnnFind chose at this shape (AlexNet's
      // grouped float16 3x3 on the H200: CUDNN_STATUS_BAD_PARAM) although the plain call takes
      // it: separate calls for this shape from now on (each rounds).
      unfused_ = true;
      if (std::getenv("KILN_GPU_TRACE")) {
        std::fprintf(stderr, "kiln gpu: %s %s: cuDNN's fused call refused (%s): separate calls\n",
                     kConvKernel, label_.c_str(), cudnn().error_string(status));
      }
    }
    // No activation and no fused algorithm (or a fused call cuDNN refused): the sums are
    // separate calls (each rounds).
    cudnn_check(dnn.forward(dnn.handle, &one, x_desc_.get(), xp, filter_.get(), weights_.data(),
                            conv_.get(), algo_, workspace_.data(), workspace_.size(), &zero,
                            y_desc_.get(), yp),
                "cudnnConvolutionForward");
    if (has_bias_) {
      cudnn_check(
          dnn.add_tensor(dnn.handle, &one, bias_desc_.get(), bias_.data(), &one, y_desc_.get(), yp),
          "cudnnAddTensor (bias)");
    }
    if (zp) {
      cudnn_check(dnn.add_tensor(dnn.handle, &one, y_desc_.get(), zp, &one, y_desc_.get(), yp),
                  "cudnnAddTensor (residual)");
    }
    if (shape_.relu) {
      cudnn_check(dnn.act_forward(dnn.handle, act_.get(), &one, y_desc_.get(), yp, &zero,
                                  y_desc_.get(), yp),
                  "cudnnActivationForward (Relu)");
    }
    post_activation(yp);
  }

  // The activation other than Relu, in place on the channels-last result.
  void post_activation(void* yp) {
    if (!shape_.post) return;
    const CudnnApi& dnn = cudnn();
    const float one = 1.f, zero = 0.f;
    cudnn_check(dnn.act_forward(dnn.handle, post_act_.get(), &one, y_desc_.get(), yp, &zero,
                                y_desc_.get(), yp),
                "cudnnActivationForward");
  }

  // Descriptors, scratch and the algorithm for one input shape, made at its first run and kept
  // for the next runs. The algorithm is what cudnnFind measures fastest on the device (so that
  // run is slower), or the tactic an engine stored for the shape (timed at compile time).
  void prepare(const DeviceTensor& x, const DeviceTensor& y, bool x_nhwc, bool y_nhwc) {
    std::vector<int64_t> key = x.dims;
    key.push_back(x_nhwc);
    key.push_back(y_nhwc);
    if (key == key_) return;
    const CudnnApi& dnn = cudnn();
    const cudnnDataType_t t = cudnn_type(dtype_);
    auto set4 = [&](TensorDesc& d, cudnnTensorFormat_t f, const std::vector<int64_t>& dims) {
      cudnn_check(
          dnn.tensor_set_4d(d.get(), f, t, static_cast<int>(dims[0]), static_cast<int>(dims[1]),
                            static_cast<int>(dims[2]), static_cast<int>(dims[3])),
          "cudnnSetTensor4dDescriptor");
    };
    set4(x_desc_, CUDNN_TENSOR_NHWC, x.dims);
    set4(y_desc_, CUDNN_TENSOR_NHWC, y.dims);
    set4(x_plain_, CUDNN_TENSOR_NCHW, x.dims);
    set4(y_plain_, CUDNN_TENSOR_NCHW, y.dims);
    const size_t elem = dtype_size(dtype_);
    x_scratch_ = x_nhwc ? DeviceBuffer() : backend_.allocate(shape_numel(x.dims) * elem);
    y_scratch_ = y_nhwc ? DeviceBuffer() : backend_.allocate(shape_numel(y.dims) * elem);
    auto known = timed_.find(key);
    if (known == timed_.end() || !apply_choice(known->second, x, x_nhwc, y_nhwc)) {
      timed_[key] = find_choice(x, y, x_nhwc, y_nhwc);
    } else if (std::getenv("KILN_GPU_TRACE")) {
      std::fprintf(stderr, "kiln gpu: %s %s %s: stored tactic: cuDNN algo %d%s: %s\n", kConvKernel,
                   label_.c_str(), dims_to_string(x.dims).c_str(), static_cast<int>(algo_),
                   fused_identity_ ? " fused" : "", use_gemm_ ? "cuBLASLt" : "cuDNN");
    }
    if (!use_gemm_) gemm_workspace_ = DeviceBuffer();
    if (use_own_) workspace_ = DeviceBuffer();
    unfused_ = false;
    key_ = key;
  }

  // One shape's choice: the cuDNN algorithm, its fused identity call, the 1x1 product, or Kiln's
  // own convolution.
  struct Choice {
    int algo = 0;
    bool fused_identity = false;
    bool gemm = false;
    bool own = false;
  };

  bool one_by_one() const {
    return r_ == 1 && s_ == 1 && shape_.stride_h == 1 && shape_.stride_w == 1 &&
           shape_.pad_h == 0 && shape_.pad_w == 0 && shape_.groups == 1;
  }

  // The 1x1 convolution as one cuBLASLt product (channels-last on both sides), with its
  // workspace; false when the shape is not one or cuBLASLt refuses it.
  bool prepare_gemm(const DeviceTensor& x, bool x_nhwc, bool y_nhwc) {
    constexpr size_t kGemmWorkspace = size_t{32} << 20;
    if (!one_by_one() || !x_nhwc || !y_nhwc) return false;
    const int64_t m = x.dims[0] * x.dims[2] * x.dims[3];
    if (!gemm_.prepare(dtype_, m, k_, c_per_group_, has_bias_, shape_.relu, shape_.residual,
                       kGemmWorkspace)) {
      return false;
    }
    gemm_workspace_ = backend_.allocate(kGemmWorkspace);
    return true;
  }

  // Sets up a stored choice without timing; false when it does not fit this build or shape
  // (an algorithm cuDNN no longer has, a product cuBLASLt refuses): the caller times afresh.
  bool apply_choice(const Choice& c, const DeviceTensor& x, bool x_nhwc, bool y_nhwc) {
    if (c.algo < 0 || c.algo >= static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)) return false;
    if (c.fused_identity && (shape_.relu || !(has_bias_ || shape_.residual) || shape_.groups != 1))
      return false;
    const CudnnApi& dnn = cudnn();
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(c.algo);
    size_t bytes = 0;
    if (dnn.forward_workspace(dnn.handle, x_desc_.get(), filter_.get(), conv_.get(), y_desc_.get(),
                              algo, &bytes) != CUDNN_STATUS_SUCCESS) {
      return false;
    }
    if (c.own && !own_) return false;
    use_gemm_ = false;
    if (c.gemm) {
      if (!prepare_gemm(x, x_nhwc, y_nhwc)) return false;
      use_gemm_ = true;
    }
    use_own_ = c.own;
    algo_ = algo;
    fused_identity_ = c.fused_identity;
    workspace_ = backend_.allocate(bytes);
    return true;
  }

  // Times the candidates on the device and keeps the fastest.
  Choice find_choice(const DeviceTensor& x, const DeviceTensor& y, bool x_nhwc, bool y_nhwc) {
    const CudnnApi& dnn = cudnn();
    const size_t elem = dtype_size(dtype_);
    // The fastest algorithm measured on this device, given a bounded workspace.
    constexpr size_t kFindWorkspace = size_t{256} << 20;
    DeviceBuffer find_ws = backend_.allocate(kFindWorkspace);
    DeviceBuffer x_tmp = backend_.allocate(shape_numel(x.dims) * elem);
    DeviceBuffer y_tmp = backend_.allocate(shape_numel(y.dims) * elem);
    backend_.fill_device(x_tmp.data(), 0, x_tmp.size(), *timing_stream_);
    constexpr int kCandidates = 8;
    cudnnConvolutionFwdAlgoPerf_t perf[kCandidates];
    int found = 0;
    cudnn_check(dnn.find_forward(dnn.handle, x_desc_.get(), x_tmp.data(), filter_.get(),
                                 weights_.data(), conv_.get(), y_desc_.get(), y_tmp.data(),
                                 kCandidates, &found, perf, find_ws.data(), kFindWorkspace),
                "cudnnFindConvolutionForwardAlgorithmEx");
    const cudnnMathType_t math =
        dtype_ == DataType::Float16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    int pick = -1;
    for (int i = 0; i < found && pick < 0; ++i) {
      // float32 must not pick a TF32 kernel, whatever cuDNN offers.
      if (perf[i].status == CUDNN_STATUS_SUCCESS &&
          (math != CUDNN_FMA_MATH || perf[i].mathType == CUDNN_FMA_MATH ||
           perf[i].mathType == CUDNN_DEFAULT_MATH)) {
        pick = i;
      }
    }
    KILN_CHECK(pick >= 0, ErrorCode::Unsupported,
               "{} {}: cuDNN has no algorithm for input {} ({}, {} groups)", kConvKernel, label_,
               dims_to_string(x.dims), dtype_name(dtype_), shape_.groups);
    algo_ = perf[pick].algo;
    workspace_ = backend_.allocate(perf[pick].memory);
    fused_identity_ = false;
    if (!shape_.relu && (has_bias_ || shape_.residual) && shape_.groups == 1) {
      // Bias and residual without Relu: cuDNN fuses them (one rounding, no extra passes over y)
      // only with an identity activation, which only implicit precomputed GEMM runs; taken
      // when cudnnFind timed that algorithm about as fast as the best. Not for grouped
      // convolutions: cudnnFind times the plain call, and the fused call ran MobileNetV2's
      // depthwise ones about 10x slower than it measured (1.34 ms against 0.13 at batch 64).
      for (int i = 0; i < found; ++i) {
        const bool math_ok = math != CUDNN_FMA_MATH || perf[i].mathType == CUDNN_FMA_MATH ||
                             perf[i].mathType == CUDNN_DEFAULT_MATH;
        if (perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
            perf[i].status != CUDNN_STATUS_SUCCESS || !math_ok) {
          continue;
        }
        constexpr float kFusedSlack = 1.15f;  // the separate sums cost passes of their own
        if (perf[i].time > perf[pick].time * kFusedSlack) break;
        DeviceBuffer ws = backend_.allocate(perf[i].memory);
        const float one = 1.f, zero = 0.f;
        const cudnnStatus_t st = dnn.forward_bias_act(
            dnn.handle, &one, x_desc_.get(), x_tmp.data(), filter_.get(), weights_.data(),
            conv_.get(), perf[i].algo, ws.data(), ws.size(), &zero, y_desc_.get(), y_tmp.data(),
            bias_desc_.get(), bias_.data(), identity_.get(), y_desc_.get(), y_tmp.data());
        if (st == CUDNN_STATUS_SUCCESS) {
          fused_identity_ = true;
          pick = i;
          algo_ = perf[i].algo;
          workspace_ = std::move(ws);
        }
        break;
      }
    }
    use_gemm_ = false;
    use_own_ = false;
    double gemm_ms = -1;
    if (prepare_gemm(x, x_nhwc, y_nhwc)) {
      gemm_ms = time_gemm(x_tmp.data(), y_tmp.data());
      use_gemm_ = gemm_ms < perf[pick].time;
    }
    // Kiln's own convolution against the library's whole call (its separate bias, residual and
    // activation passes too), both channels-last on the same scratch.
    double library_ms = -1, own_ms = -1;
    if (own_) {
      DeviceBuffer z_tmp;
      if (shape_.residual) z_tmp = backend_.allocate(shape_numel(y.dims) * elem);
      const void* zp = shape_.residual ? z_tmp.data() : nullptr;
      library_ms = replayed_ms([&] {
        if (use_gemm_) {
          gemm_.run(x_tmp.data(), weights_.data(), has_bias_ ? bias_.data() : nullptr, zp,
                    y_tmp.data(), gemm_workspace_.data(), compute_handle());
          post_activation(y_tmp.data());
        } else {
          convolve(x_tmp.data(), y_tmp.data(), zp);
        }
      });
      std::vector<DeviceTensor> in(shape_.residual ? 4 : 1);
      in[0] = {dtype_, x.dims, x_tmp.data(), Layout::channels_last()};
      if (shape_.residual) in[3] = {dtype_, y.dims, z_tmp.data(), Layout::channels_last()};
      SameOutput same({dtype_, y.dims, y_tmp.data(), Layout::channels_last()});
      try {
        own_ms = replayed_ms([&] { own_->run(in, same, *timing_stream_); });
        use_own_ = own_ms < library_ms;
      } catch (const Error& e) {
        // A shape the own convolution refuses at the run (past its index limits): the library.
        if (std::getenv("KILN_GPU_TRACE")) {
          std::fprintf(stderr, "kiln gpu: %s %s: own convolution refused: %s\n", kConvKernel,
                       label_.c_str(), e.message().c_str());
        }
      }
      unfused_ = false;  // the real run decides again on its own operands
    }
    if (std::getenv("KILN_GPU_TRACE")) {
      std::fprintf(stderr,
                   "kiln gpu: %s %s %s: cuDNN algo %d%s %.4f ms (%zu bytes), cuBLASLt %.4f ms, "
                   "whole call %.4f ms, own %.4f ms: %s\n",
                   kConvKernel, label_.c_str(), dims_to_string(x.dims).c_str(),
                   static_cast<int>(algo_), fused_identity_ ? " fused" : "",
                   static_cast<double>(perf[pick].time), perf[pick].memory, gemm_ms, library_ms,
                   own_ms,
                   use_own_    ? "own"
                   : use_gemm_ ? "cuBLASLt"
                               : "cuDNN");
    }
    return {static_cast<int>(algo_), fused_identity_, use_gemm_, use_own_};
  }

 public:
  // One entry per shape timed: "N,C,H,W,x_nhwc,y_nhwc=algo,fused,gemm,own", joined by ';'
  // (engines written before the own candidate have three choices: read as not own).
  std::string tactics() const override {
    std::string out;
    for (const auto& [key, c] : timed_) {
      if (!out.empty()) out += ';';
      out += fmt::format("{}={},{:d},{:d},{:d}", fmt::join(key, ","), c.algo, c.fused_identity,
                         c.gemm, c.own);
    }
    return out;
  }
  void use_tactics(std::string_view text) override {
    std::map<std::vector<int64_t>, Choice> parsed;
    for (std::string_view entry : split_text(text, ';')) {
      const size_t eq = entry.find('=');
      if (eq == std::string_view::npos) return;  // not this build's form: time afresh
      std::vector<int64_t> key, choice;
      if (!parse_int_list(entry.substr(0, eq), key) || key.size() != 6 ||
          !parse_int_list(entry.substr(eq + 1), choice) ||
          (choice.size() != 3 && choice.size() != 4)) {
        return;
      }
      parsed[key] = {static_cast<int>(choice[0]), choice[1] != 0, choice[2] != 0,
                     choice.size() == 4 && choice[3] != 0};
    }
    timed_ = std::move(parsed);
  }

 private:
  hipStream_t compute_handle() { return gpu_stream(*timing_stream_).handle(); }

  // The median time of `run_once` over five runs after a warm-up on the compute stream, in ms.
  template <typename F>
  double median_ms(F&& run_once) {
    Stream& stream = *timing_stream_;
    run_once();
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) {
      std::unique_ptr<Event> begin = backend_.create_event(), end = backend_.create_event();
      begin->record(stream);
      run_once();
      end->record(stream);
      end->synchronize();
      ms.push_back(end->elapsed_ms(*begin));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  // The time of one `run_once` as a replayed plan runs it: recorded kRuns times back to back
  // into one graph, the graph replayed (a warm-up, then the median of five, divided by kRuns).
  // Timed one launch at a time instead, the host's cost of each call (cuDNN's is the largest) is
  // in the figure wherever it exceeds the device's. Falls back to launch-by-launch timing where
  // the work cannot be recorded.
  template <typename F>
  double replayed_ms(F&& run_once) {
    constexpr int kRuns = 8;
    Stream& stream = *timing_stream_;
    run_once();  // anything a first call sets up happens outside the recording
    std::unique_ptr<CapturedWork> work;
    bool capturing = false;
    try {
      stream.begin_capture();
      capturing = true;
      for (int i = 0; i < kRuns; ++i) run_once();
      capturing = false;
      work = stream.end_capture();
    } catch (const Error&) {
      if (capturing) {
        try {
          stream.end_capture();  // closes the recording a failed call left open
        } catch (const Error&) {
        }
      }
      return median_ms(run_once);
    }
    return median_ms([&] { work->replay(stream); }) / kRuns;
  }

  // The 1x1 product's median time, in ms.
  double time_gemm(const void* x, void* y) {
    const void* bias = has_bias_ ? bias_.data() : nullptr;
    const void* z = shape_.residual ? y : nullptr;
    return median_ms([&] {
      gemm_.run(x, weights_.data(), bias, z, y, gemm_workspace_.data(), compute_handle());
    });
  }

  GpuBackendImpl& backend_;
  ConvShape shape_;
  DataType dtype_;
  std::string label_;
  int64_t k_ = 0, c_per_group_ = 0, r_ = 0, s_ = 0;
  bool has_bias_ = false;
  DeviceBuffer weights_, bias_, workspace_, x_scratch_, y_scratch_, z_scratch_, gemm_workspace_;
  ConvGemm gemm_;
  bool use_gemm_ = false;        // the 1x1 product through cuBLASLt was faster at this shape
  std::unique_ptr<Kernel> own_;  // Kiln's own convolution (float16), the tactic's other candidate
  bool use_own_ = false;         // it was faster than the library's whole call at this shape
  Stream* timing_stream_ = nullptr;  // the stream of the run that times the candidates
  bool fused_identity_ = false;      // bias / residual without Relu in cuDNN's fused call
  bool unfused_ = false;             // cuDNN refused the fused call at this shape: separate calls
  FilterDesc filter_;
  ConvDesc conv_;
  ActDesc act_, identity_, post_act_;
  TensorDesc bias_desc_, x_desc_, y_desc_, x_plain_, y_plain_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  std::vector<int64_t> key_;
  std::map<std::vector<int64_t>, Choice> timed_;  // by shape key: timed here or stored
};

std::string check_node(const ir::Node& node) {
  ConvShape shape;
  std::string why = check(node, shape);
  if (why.empty() && !cudnn().ok()) why = cudnn().error;
  return why;
}

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  ConvShape shape;
  check(node, shape);
  return std::make_unique<ConvKernel>(static_cast<GpuBackendImpl&>(backend), node, shape);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Conv",
                      .name = kConvKernel,
                      .library = "cuDNN",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedConv",
                      .name = kConvKernel,
                      .library = "cuDNN",
                      .check = check_node,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu

#else  // AMD: MIOpen would take cuDNN's place; Debian's ROCm 5.2 has none.

#include "backends/gpu/runtime/missing_library.hpp"

namespace kiln::backends::gpu {
namespace {

const bool kRegistered =
    register_missing_library("MIOpen", "gpu.cudnn.conv", {{"", "Conv"}, {"ai.kiln", "FusedConv"}});

}  // namespace
}  // namespace kiln::backends::gpu
#endif
