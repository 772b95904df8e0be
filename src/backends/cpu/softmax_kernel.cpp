// Softmax and LogSoftmax on the CPU through oneDNN (max-subtracted, one pass per row in its jit
// kernels). Opset 13 normalizes along one axis; earlier opsets over every dim from `axis` on
// (the input coerced to 2-D): both are a (outer, len, inner) view normalized along len.
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_softmax(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 1, 8); !why.empty()) return why;
  return check_f32_outputs(node);
}

class SoftmaxKernel final : public Kernel {
 public:
  explicit SoftmaxKernel(const ir::Node& node)
      : node_(node),
        log_(node.op_type() == "LogSoftmax"),
        whole_rows_(node.opset() < 13),
        axis_(ops::AttrReader(node).attr_int("axis", node.opset() < 13 ? 1 : -1)) {}
  std::string_view name() const override { return "cpu.softmax"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    ops::AttrReader(node_).check(axis_ >= -rank && axis_ < rank,
                                 "axis {} is out of range for rank {}", axis_, rank);
    const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    if (y.numel() == 0) return;
    int64_t outer = 1, len = 1, inner = 1;
    for (size_t d = 0; d < x.dims.size(); ++d) {
      int64_t& part = d < axis ? outer : (d == axis || whole_rows_ ? len : inner);
      part *= x.dims[d];
    }
    const std::vector<int64_t> view = {outer, len, inner};
    if (view != view_) {
      // About ten operations per element (max, exp, sum, scale) over two passes.
      threads_ = threads_for_work(10.0 * static_cast<double>(y.numel()),
                                  12.0 * static_cast<double>(y.numel()));
      ThreadLimit limit(threads_);
      const dnnl::memory::desc md = plain_desc(view);
      if (log_) {
        log_prim_ = dnnl::logsoftmax_forward(dnnl::logsoftmax_forward::primitive_desc(
            dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), engine()));
      } else {
        prim_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
            dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), engine()));
      }
      md_ = md;
      view_ = view;
    }
    const std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, wrap(md_, x.data)},
                                                        {DNNL_ARG_DST, wrap(md_, y.data)}};
    ThreadLimit limit(threads_);
    if (log_) {
      log_prim_.execute(dnnl_stream(stream), args);
    } else {
      prim_.execute(dnnl_stream(stream), args);
    }
  }

 private:
  const ir::Node& node_;
  bool log_, whole_rows_;
  int64_t axis_;
  std::vector<int64_t> view_;
  int threads_ = 1;  // threads_for_work of view_, held when creating and running the primitive
  dnnl::memory::desc md_;
  dnnl::softmax_forward prim_;
  dnnl::logsoftmax_forward log_prim_;
};

std::unique_ptr<Kernel> create_softmax(const ir::Node& node) {
  return std::make_unique<SoftmaxKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Softmax",
                      .name = "cpu.softmax",
                      .check = check_softmax,
                      .create = create_softmax});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "LogSoftmax",
                      .name = "cpu.softmax",
                      .check = check_softmax,
                      .create = create_softmax});

}  // namespace kiln::backends::cpu
