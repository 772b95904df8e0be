// MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on the GPU through cuDNN 9's pooling
// (NVIDIA; MIOpen would serve AMD): 2-D, float32 and float16, channels-last or row-major (the
// output takes the input's layout), symmetric pads, floor output sizes. Other forms (ceil_mode,
// dilations, asymmetric pads, MaxPool's indices output) fall back to the CPU with the reason.
#include <fmt/format.h>

#include "ir/graph.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)

#include <vector>

#include "backends/gpu/runtime/cudnn_api.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/kernel_table.hpp"
#include "core/dtype.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kPoolKernel = "gpu.cudnn.pool";

struct PoolShape {
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX_DETERMINISTIC;
  bool global = false;
  int kh = 1, kw = 1, pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
};

std::string check(const ir::Node& node, PoolShape& out) {
  const std::string& op = node.op_type();
  const ir::Value* x = node.input(0);
  if (!x || !node.output(0)) return "missing operands";
  if (node.outputs().size() > 1 && node.output(1)) {
    return "MaxPool's indices output is not supported on the GPU yet";
  }
  const TypeInfo& tx = x->type();
  if (!tx.is_tensor() || (tx.dtype != DataType::Float32 && tx.dtype != DataType::Float16)) {
    return fmt::format("{} on the GPU takes float32 or float16, not {}", op, tx.to_string());
  }
  if (!tx.shape || tx.shape->rank() != 4) return "only 2-D pooling (4-D inputs) runs on the GPU";
  out.global = op == "GlobalAveragePool" || op == "GlobalMaxPool";
  const bool average = op == "AveragePool" || op == "GlobalAveragePool";
  if (average) {
    out.mode = int_attr(node, "count_include_pad", 0) != 0
                   ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                   : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  }
  if (out.global) return "";
  if (int_attr(node, "ceil_mode", 0) != 0) {
    return fmt::format("{} with ceil_mode is not supported on the GPU yet", op);
  }
  const std::string auto_pad = string_attr(node, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    return fmt::format("{} with auto_pad {} is not supported on the GPU yet", op, auto_pad);
  }
  const std::vector<int64_t> kernel = ints_attr(node, "kernel_shape");
  std::vector<int64_t> pads = ints_attr(node, "pads", {0, 0, 0, 0});
  if (auto_pad == "VALID") pads = {0, 0, 0, 0};
  const std::vector<int64_t> strides = ints_attr(node, "strides", {1, 1});
  const std::vector<int64_t> dilations = ints_attr(node, "dilations", {1, 1});
  if (kernel.size() != 2 || pads.size() != 4 || strides.size() != 2) {
    return fmt::format("{}'s kernel_shape, pads or strides do not match 2-D pooling", op);
  }
  if (dilations != std::vector<int64_t>{1, 1}) {
    return fmt::format("{} with dilations is not supported on the GPU yet", op);
  }
  if (pads[0] != pads[2] || pads[1] != pads[3]) {
    return fmt::format("{} with asymmetric pads is not supported on the GPU yet", op);
  }
  out.kh = static_cast<int>(kernel[0]);
  out.kw = static_cast<int>(kernel[1]);
  out.pad_h = static_cast<int>(pads[0]);
  out.pad_w = static_cast<int>(pads[1]);
  out.stride_h = static_cast<int>(strides[0]);
  out.stride_w = static_cast<int>(strides[1]);
  return "";
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(const ir::Node& node, const PoolShape& shape)
      : shape_(shape), dtype_(node.input(0)->type().dtype), label_(node.name()) {
    const CudnnApi& dnn = cudnn();
    cudnn_check(dnn.pool_create(&pool_), "cudnnCreatePoolingDescriptor");
    cudnn_check(dnn.tensor_create(&x_desc_), "cudnnCreateTensorDescriptor");
    cudnn_check(dnn.tensor_create(&y_desc_), "cudnnCreateTensorDescriptor");
  }
  ~PoolKernel() override {
    const CudnnApi& dnn = cudnn();
    dnn.pool_destroy(pool_);
    dnn.tensor_destroy(x_desc_);
    dnn.tensor_destroy(y_desc_);
  }
  PoolKernel(const PoolKernel&) = delete;
  PoolKernel& operator=(const PoolKernel&) = delete;

  std::string_view name() const override { return kPoolKernel; }
  // The output takes the input's layout (a global pool's [N, C, 1, 1] is the same bytes in
  // both, so it may also be written row-major after a channels-last input).
  BlockedLayouts blocked_layouts() const override {
    if (shape_.global) return {.input0 = true, .output0 = true};
    return {.uniform = true};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const CudnnApi& dnn = cudnn();
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == dtype_ && x.dims.size() == 4, ErrorCode::Internal,
               "{} {}: input is {} {}", kPoolKernel, label_, dtype_name(x.dtype),
               dims_to_string(x.dims));
    int kh = shape_.kh, kw = shape_.kw;
    if (shape_.global) {
      kh = static_cast<int>(x.dims[2]);
      kw = static_cast<int>(x.dims[3]);
    }
    const int64_t oh = (x.dims[2] + 2 * shape_.pad_h - kh) / shape_.stride_h + 1;
    const int64_t ow = (x.dims[3] + 2 * shape_.pad_w - kw) / shape_.stride_w + 1;
    KILN_CHECK_ARG(oh > 0 && ow > 0, "{} {}: a {}x{} window does not fit input {}", kPoolKernel,
                   label_, kh, kw, dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, dtype_, {x.dims[0], x.dims[1], oh, ow});
    if (y.numel() == 0) return;
    const bool x_nhwc = x.layout.kind == Layout::Kind::ChannelsLast;
    // [N, C, 1, 1] lies alike in both layouts: describe it as the input's.
    const bool y_nhwc = (oh == 1 && ow == 1) ? x_nhwc : y.layout.kind == Layout::Kind::ChannelsLast;
    KILN_CHECK(x_nhwc == y_nhwc, ErrorCode::Internal, "{} {}: input {} but output {}", kPoolKernel,
               label_, x.layout.to_string(), y.layout.to_string());
    const cudnnDataType_t t = dtype_ == DataType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const cudnnTensorFormat_t f = x_nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    cudnn_check(dnn.pool_set_2d(pool_, shape_.mode, CUDNN_PROPAGATE_NAN, kh, kw, shape_.pad_h,
                                shape_.pad_w, shape_.stride_h, shape_.stride_w),
                "cudnnSetPooling2dDescriptor");
    cudnn_check(
        dnn.tensor_set_4d(x_desc_, f, t, i(x.dims[0]), i(x.dims[1]), i(x.dims[2]), i(x.dims[3])),
        "cudnnSetTensor4dDescriptor");
    cudnn_check(dnn.tensor_set_4d(y_desc_, f, t, i(y.dims[0]), i(y.dims[1]), i(oh), i(ow)),
                "cudnnSetTensor4dDescriptor");
    std::lock_guard<std::mutex> lock(cudnn_mutex());
    cudnn_check(dnn.set_stream(dnn.handle, gpu_stream(stream).handle()), "cudnnSetStream");
    const float one = 1.f, zero = 0.f;
    cudnn_check(dnn.pool_forward(dnn.handle, pool_, &one, x_desc_, x.data, &zero, y_desc_, y.data),
                "cudnnPoolingForward");
  }

 private:
  PoolShape shape_;
  DataType dtype_;
  std::string label_;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
};

std::string check_node(const ir::Node& node) {
  PoolShape shape;
  std::string why = check(node, shape);
  if (why.empty() && !cudnn().ok()) why = cudnn().error;
  return why;
}

std::unique_ptr<Kernel> create(const ir::Node& node) {
  PoolShape shape;
  check(node, shape);
  return std::make_unique<PoolKernel>(node, shape);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "MaxPool",
                      .name = kPoolKernel,
                      .library = "cuDNN",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "AveragePool",
                      .name = kPoolKernel,
                      .library = "cuDNN",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "GlobalAveragePool",
                      .name = kPoolKernel,
                      .library = "cuDNN",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "GlobalMaxPool",
                      .name = kPoolKernel,
                      .library = "cuDNN",
                      .check = check_node,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu

#else  // AMD: MIOpen would take cuDNN's place; Debian's ROCm 5.2 has none.

#include "backends/gpu/runtime/missing_library.hpp"

namespace kiln::backends::gpu {
namespace {

const bool kRegistered = register_missing_library(
    "MIOpen", "gpu.cudnn.pool",
    {{"", "MaxPool"}, {"", "AveragePool"}, {"", "GlobalAveragePool"}, {"", "GlobalMaxPool"}});

}  // namespace
}  // namespace kiln::backends::gpu
#endif
