// LRN on the CPU through oneDNN's across-channels LRN (jit kernels): ONNX's
// y = x / (bias + alpha / size * sum of x^2 over the channel window)^beta is oneDNN's formula
// with k = bias and local size = size, for an odd size (the window centred on the channel
// either way; an even size places ONNX's window one channel off centre: the reference takes it).
// float32, 4-D NCHW. AlexNet-style models spent over half their run in the reference's LRN
// (light_inception_v1: 15.3 of 27.8 ms).
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_lrn(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 4, 4); !why.empty()) return why;
  if (std::string why = check_f32_outputs(node); !why.empty()) return why;
  const int64_t size = ops::AttrReader(node).attr_int("size", 0);
  if (size < 1 || size % 2 == 0) return "an even or missing size (the reference takes it)";
  return "";
}

class LrnKernel final : public Kernel {
 public:
  explicit LrnKernel(const ir::Node& node) {
    ops::AttrReader attrs(node);
    size_ = attrs.attr_int("size", 1);
    alpha_ = attrs.attr_float("alpha", 1e-4f);
    beta_ = attrs.attr_float("beta", 0.75f);
    bias_ = attrs.attr_float("bias", 1.f);
  }
  std::string_view name() const override { return "cpu.lrn"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    if (y.numel() == 0) return;
    if (x.dims != dims_) {
      // About 2 size + 10 operations per element (the window's squares, the power).
      const double work =
          (2.0 * static_cast<double>(size_) + 10.0) * static_cast<double>(y.numel());
      threads_ = threads_for_work(work, 8.0 * static_cast<double>(y.numel()));
      ThreadLimit limit(threads_);
      md_ = plain_desc(x.dims);
      // oneDNN's alpha is the sum's coefficient before its division by the local size, as
      // ONNX's: both divide by size.
      prim_ = dnnl::lrn_forward(dnnl::lrn_forward::primitive_desc(
          dnnl::lrn_forward::desc(dnnl::prop_kind::forward_inference,
                                  dnnl::algorithm::lrn_across_channels, md_, size_, alpha_, beta_,
                                  bias_),
          engine()));
      dims_ = x.dims;
    }
    ThreadLimit limit(threads_);
    prim_.execute(dnnl_stream(stream),
                  {{DNNL_ARG_SRC, wrap(md_, x.data)}, {DNNL_ARG_DST, wrap(md_, y.data)}});
  }

 private:
  int64_t size_ = 1;
  float alpha_ = 1e-4f, beta_ = 0.75f, bias_ = 1.f;
  std::vector<int64_t> dims_;
  int threads_ = 1;
  dnnl::memory::desc md_;
  dnnl::lrn_forward prim_;
};

std::unique_ptr<Kernel> create_lrn(const ir::Node& node) {
  return std::make_unique<LrnKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "LRN",
                      .name = "cpu.lrn",
                      .check = check_lrn,
                      .create = create_lrn});

}  // namespace kiln::backends::cpu
