// MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool on Kiln's own kernel
// (kernels/pool.hip): 2-D, float32, float16 and bfloat16, row-major or channels-last (the output
// takes the input's layout, as cuDNN's pooling does), any window, stride, dilation and pads,
// auto_pad and ceil_mode. On AMD it is the pooling (Debian's ROCm 5.2 has no MIOpen); on NVIDIA
// it comes after cuDNN's (gpu.cudnn.pool) and takes what cuDNN's refuses (asymmetric pads,
// ceil_mode, dilations, bfloat16), unless KILN_GPU_OWN_KERNELS prefers Kiln's own kernels.
// MaxPool's indices output and 1-D / 3-D pooling fall back to the CPU with the reason.
#include <fmt/format.h>

#include "backends/gpu/kernels/pool.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/window_2d.hpp"
#include "backends/kernel_table.hpp"
#include "core/dtype.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kOwnPoolKernel = "gpu.own.pool";

struct PoolNode {
  Window2d window;  // kh, kw unused for a global pool (the plane at each run)
  bool global = false, max = true, count_include_pad = false;
};

std::string check(const ir::Node& node, PoolNode& out) {
  const std::string& op = node.op_type();
  const ir::Value* x = node.input(0);
  if (!x || !node.output(0)) return "missing operands";
  if (node.outputs().size() > 1 && node.output(1)) {
    return "MaxPool's indices output is not supported on the GPU yet";
  }
  const TypeInfo& tx = x->type();
  if (!tx.is_tensor() || !float_type(tx.dtype)) {
    return fmt::format("{} on the GPU takes float32, float16 or bfloat16, not {}", op,
                       tx.to_string());
  }
  if (!tx.shape || tx.shape->rank() != 4) return "only 2-D pooling (4-D inputs) runs on the GPU";
  out.global = op == "GlobalAveragePool" || op == "GlobalMaxPool";
  out.max = op == "MaxPool" || op == "GlobalMaxPool";
  if (out.global) return "";
  out.count_include_pad = int_attr(node, "count_include_pad", 0) != 0;
  if (int_attr(node, "storage_order", 0) != 0) {
    return "MaxPool's storage_order 1 is not supported on the GPU yet";
  }
  const std::vector<int64_t> kernel = ints_attr(node, "kernel_shape");
  if (kernel.size() != 2 || kernel[0] < 1 || kernel[1] < 1 || kernel[0] > (1 << 16) ||
      kernel[1] > (1 << 16)) {
    return fmt::format("{}'s kernel_shape does not describe a 2-D window", op);
  }
  out.window.kh = kernel[0];
  out.window.kw = kernel[1];
  return read_window_2d(node, "pooling", out.window);
}

class OwnPoolKernel final : public Kernel {
 public:
  OwnPoolKernel(const ir::Node& node, const PoolNode& shape)
      : shape_(shape), dtype_(node.input(0)->type().dtype), label_(node.name()) {}
  std::string_view name() const override { return kOwnPoolKernel; }
  // The output takes the input's layout (a global pool's [N, C, 1, 1] is the same bytes in
  // both, so it may also be written row-major after a channels-last input).
  BlockedLayouts blocked_layouts() const override {
    if (shape_.global) return {.input0 = true, .output0 = true};
    return {.uniform = true};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.dtype == dtype_ && x.dims.size() == 4, ErrorCode::Internal,
               "{} {}: input is {} {}", kOwnPoolKernel, label_, dtype_name(x.dtype),
               dims_to_string(x.dims));
    Window2d win = shape_.window;
    if (shape_.global) {
      win = Window2d{};
      win.kh = x.dims[2];
      win.kw = x.dims[3];
    }
    const WindowExtent e = window_extent(win, x.dims[2], x.dims[3]);
    KILN_CHECK_ARG(e.oh > 0 && e.ow > 0, "{} {}: a {}x{} window does not fit input {}",
                   kOwnPoolKernel, label_, win.kh, win.kw, dims_to_string(x.dims));
    DeviceTensor y = outputs.allocate(0, dtype_, {x.dims[0], x.dims[1], e.oh, e.ow});
    if (y.numel() == 0) return;
    const bool x_nhwc = x.layout.kind == Layout::Kind::ChannelsLast;
    // [N, C, 1, 1] lies alike in both layouts: read it as the input's.
    const bool y_nhwc =
        (e.oh == 1 && e.ow == 1) ? x_nhwc : y.layout.kind == Layout::Kind::ChannelsLast;
    KILN_CHECK(x_nhwc == y_nhwc, ErrorCode::Internal, "{} {}: input {} but output {}",
               kOwnPoolKernel, label_, x.layout.to_string(), y.layout.to_string());
    kernels::PoolArgs a;
    a.type = *float_type(dtype_);
    a.x = x.data;
    a.y = y.data;
    a.channels_last = x_nhwc;
    a.max = shape_.max;
    a.count_include_pad = shape_.count_include_pad;
    a.n = x.dims[0], a.c = x.dims[1], a.h = x.dims[2], a.w = x.dims[3];
    a.oh = e.oh, a.ow = e.ow;
    a.kh = static_cast<int>(win.kh), a.kw = static_cast<int>(win.kw);
    a.stride_h = win.stride_h, a.stride_w = win.stride_w;
    a.dil_h = win.dil_h, a.dil_w = win.dil_w;
    a.pad_top = static_cast<int>(e.pads[0]), a.pad_left = static_cast<int>(e.pads[1]);
    a.pad_bottom = static_cast<int>(e.pads[2]), a.pad_right = static_cast<int>(e.pads[3]);
    check_launch(kernels::launch_pool(a, gpu_stream(stream).handle()), kOwnPoolKernel);
  }

 private:
  PoolNode shape_;
  DataType dtype_;
  std::string label_;
};

std::string check_node(const ir::Node& node) {
  PoolNode shape;
  return check(node, shape);
}

std::unique_ptr<Kernel> create(const ir::Node& node) {
  PoolNode shape;
  check(node, shape);
  return std::make_unique<OwnPoolKernel>(node, shape);
}

// Priority -1: after cuDNN's pooling where there is one, unless the backend's KernelPreference
// puts Kiln's own kernels first.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "MaxPool",
                      .name = kOwnPoolKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "AveragePool",
                      .name = kOwnPoolKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "GlobalAveragePool",
                      .name = kOwnPoolKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "GlobalMaxPool",
                      .name = kOwnPoolKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
