// LSTM on the GPU (kernels/lstm.hip): float32 and float16, forward, reverse and bidirectional,
// layout 0 and 1, biases, peepholes, initial states, sequence_lens (int32), clip, input_forget
// and every ONNX recurrent activation (read as the reference reads them,
// ops/recurrent_activations.hpp); any subset of Y, Y_h and Y_c. The products run on Kiln's own
// GEMM on both vendors (cuBLASLt is not called here); the scratch is allocated at the first run
// of each input shape. bfloat16 and other sequence_lens types fall back to the CPU with the reason.
#include <fmt/format.h>

#include "backends/gpu/kernels/lstm.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "ops/kernel_context.hpp"
#include "ops/recurrent_activations.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::RnnActivation;

constexpr const char* kName = "gpu.lstm";

// What the node fixes: the launch's arguments that hold for every run (type, directions,
// layout, activations, clip, input_forget), read once.
struct LstmNode {
  DataType dtype = DataType::Float32;
  int64_t hidden_size = 0;  // the attribute, 0 when absent
  kernels::LstmArgs args;
};

std::optional<RnnActivation> activation_kind(const std::string& name) {
  static const std::pair<const char*, RnnActivation> kNames[] = {
      {"sigmoid", RnnActivation::Sigmoid},
      {"tanh", RnnActivation::Tanh},
      {"relu", RnnActivation::Relu},
      {"affine", RnnActivation::Affine},
      {"leakyrelu", RnnActivation::LeakyRelu},
      {"thresholdedrelu", RnnActivation::ThresholdedRelu},
      {"scaledtanh", RnnActivation::ScaledTanh},
      {"hardsigmoid", RnnActivation::HardSigmoid},
      {"elu", RnnActivation::Elu},
      {"softsign", RnnActivation::Softsign},
      {"softplus", RnnActivation::Softplus}};
  for (const auto& [n, k] : kNames) {
    if (name == n) return k;
  }
  return std::nullopt;
}

// Reads the node into `out`; "" or why the GPU cannot take it.
std::string read_node(const ir::Node& node, LstmNode& out) {
  const TypeInfo* x = tensor_type(node.input(0));
  if (!x || (x->dtype != DataType::Float32 && x->dtype != DataType::Float16)) {
    return fmt::format("LSTM on the GPU takes float32 or float16, not {}",
                       x ? x->to_string() : std::string("a missing X"));
  }
  out.dtype = x->dtype;
  kernels::LstmArgs& a = out.args;
  a.type = out.dtype == DataType::Float16 ? kernels::FloatType::F16 : kernels::FloatType::F32;
  if (!x->shape || x->shape->rank() != 3) return "LSTM on the GPU needs a 3-D X";
  for (size_t slot = 1; slot < node.inputs().size(); ++slot) {
    const ir::Value* v = node.input(slot);
    if (!v) {
      if (slot <= 2) return fmt::format("LSTM input {} is missing", slot);
      continue;
    }
    const TypeInfo* t = tensor_type(v);
    const DataType want = slot == 4 ? DataType::Int32 : out.dtype;
    if (!t || t->dtype != want) {
      return fmt::format("LSTM input {} must be a {} tensor on the GPU, not {}", slot,
                         dtype_name(want), t ? t->to_string() : std::string("a non-tensor"));
    }
  }
  // Constant lengths are checked here, so a bad one gets the reference's error on the CPU; the
  // kernel reads a run-time one outside [0, seq] as 0.
  if (const std::optional<std::vector<int64_t>> lens = constant_ints(node, 4)) {
    const Dim& seq = x->shape->dims()[node.opset() >= 14 && int_attr(node, "layout", 0) ? 1 : 0];
    for (int64_t len : *lens) {
      if (len < 0 || (seq.is_static() && len > seq.value()))
        return fmt::format("LSTM sequence_lens holds {}, outside [0, seq]", len);
    }
  }
  try {
    const ops::AttrReader attrs(node);
    const int64_t layout = node.opset() >= 14 ? attrs.attr_int("layout", 0) : 0;
    if (layout != 0 && layout != 1) return fmt::format("LSTM layout {}", layout);
    a.batch_major = layout == 1;
    const std::string direction = attrs.attr_string("direction", "forward");
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
      return fmt::format("LSTM direction '{}'", direction);
    }
    a.dirs = direction == "bidirectional" ? 2 : 1;
    a.reverse = direction == "reverse";
    const std::vector<ops::RecurrentActivation> acts =
        ops::read_recurrent_activations(attrs, {"Sigmoid", "Tanh", "Tanh"}, a.dirs);
    for (size_t k = 0; k < acts.size(); ++k) {
      const std::optional<RnnActivation> kind = activation_kind(acts[k].name);
      if (!kind) return fmt::format("LSTM activation '{}' on the GPU", acts[k].name);
      a.act[k / 3][k % 3] = {*kind, static_cast<float>(acts[k].alpha),
                             static_cast<float>(acts[k].beta)};
    }
    a.has_clip = attrs.has_attr("clip");
    a.clip = a.has_clip ? attrs.attr_float("clip") : 0.f;
    a.input_forget = attrs.attr_int("input_forget", 0) != 0;
    out.hidden_size = attrs.attr_int("hidden_size", 0);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

std::string check(const ir::Node& node) {
  LstmNode n;
  return read_node(node, n);
}

// The scratch of one input shape.
struct ShapeScratch {
  std::vector<int64_t> x_dims, r_dims;
  DeviceBuffer buffer;
};

class LstmKernel final : public Kernel {
 public:
  LstmKernel(GpuBackendImpl& backend, const ir::Node& node)
      : backend_(backend), label_(node.name()) {
    const std::string why = read_node(node, lstm_);
    KILN_CHECK(why.empty(), ErrorCode::Internal, "{} {}: {}", kName, label_, why);
    kernels::LstmArgs& a = lstm_.args;
    a.matrix_tiles = has_matrix_tiles(backend.device_info());
    a.wgmma = has_wgmma(backend.device_info());
    a.multiprocessors = backend.device_info().multiprocessors;
    for (size_t k = 0; k < 3; ++k) wants_[k] = node.output(k) != nullptr;
  }
  std::string_view name() const override { return kName; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    auto given = [&](size_t slot) { return slot < in.size() && in[slot].defined(); };
    const DeviceTensor& x = in[0];
    const DeviceTensor& w = in[1];
    const DeviceTensor& r = in[2];
    KILN_CHECK_ARG(x.dims.size() == 3 && r.dims.size() == 3 && w.dims.size() == 3,
                   "{} {}: X {}, W {} and R {} must be 3-D", kName, label_, dims_to_string(x.dims),
                   dims_to_string(w.dims), dims_to_string(r.dims));
    kernels::LstmArgs a = lstm_.args;
    a.seq = a.batch_major ? x.dims[1] : x.dims[0];
    a.batch = a.batch_major ? x.dims[0] : x.dims[1];
    a.input = x.dims[2];
    a.hidden = r.dims[2];
    KILN_CHECK_ARG(lstm_.hidden_size <= 0 || lstm_.hidden_size == a.hidden,
                   "{} {}: hidden_size {} but R is {}", kName, label_, lstm_.hidden_size,
                   dims_to_string(r.dims));
    const int64_t gates = 4 * a.hidden;
    KILN_CHECK_ARG(a.hidden > 0 && w.dims == (std::vector<int64_t>{a.dirs, gates, a.input}) &&
                       r.dims == (std::vector<int64_t>{a.dirs, gates, a.hidden}),
                   "{} {}: W {} and R {} do not fit X {} with {} direction(s)", kName, label_,
                   dims_to_string(w.dims), dims_to_string(r.dims), dims_to_string(x.dims), a.dirs);
    const int64_t states = a.dirs * a.batch * a.hidden;
    // Each optional operand's element count, checked before the kernels read it.
    auto optional = [&](size_t slot, int64_t count, const char* what) -> const void* {
      if (!given(slot)) return nullptr;
      KILN_CHECK_ARG(in[slot].numel() == count, "{} {}: {} has {} elements, expected {}", kName,
                     label_, what, in[slot].numel(), count);
      return in[slot].data;
    };
    a.b = optional(3, a.dirs * 2 * gates, "B");
    a.lens = static_cast<const int32_t*>(optional(4, a.batch, "sequence_lens"));
    a.h0 = optional(5, states, "initial_h");
    a.c0 = optional(6, states, "initial_c");
    a.p = optional(7, a.dirs * 3 * a.hidden, "P");
    a.x = x.data;
    a.w = w.data;
    a.r = r.data;
    const std::vector<int64_t> state_dims = a.batch_major
                                                ? std::vector<int64_t>{a.batch, a.dirs, a.hidden}
                                                : std::vector<int64_t>{a.dirs, a.batch, a.hidden};
    if (wants_[0]) {
      a.y = outputs
                .allocate(0, lstm_.dtype,
                          a.batch_major ? std::vector<int64_t>{a.batch, a.seq, a.dirs, a.hidden}
                                        : std::vector<int64_t>{a.seq, a.dirs, a.batch, a.hidden})
                .data;
    }
    if (wants_[1]) a.y_h = outputs.allocate(1, lstm_.dtype, state_dims).data;
    if (wants_[2]) a.y_c = outputs.allocate(2, lstm_.dtype, state_dims).data;
    a.scratch = scratch_for(x.dims, r.dims, a);
    check_launch(kernels::launch_lstm(a, gpu_stream(stream).handle()), kName);
  }

 private:
  // Scratch for these dims, allocated at their first run (an eager run: a recorded run of the
  // same shape finds it).
  void* scratch_for(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& r_dims,
                    const kernels::LstmArgs& a) {
    const ShapeScratch* s = cache_.find(
        [&](const ShapeScratch& e) { return e.x_dims == x_dims && e.r_dims == r_dims; });
    if (!s) {
      s = &cache_.add({x_dims, r_dims, backend_.allocate(kernels::lstm_scratch_bytes(a))});
    }
    return s->buffer.data();
  }

  GpuBackendImpl& backend_;
  std::string label_;
  LstmNode lstm_;
  bool wants_[3] = {};
  ShapeCache<ShapeScratch> cache_;
};

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  return std::make_unique<LstmKernel>(static_cast<GpuBackendImpl&>(backend), node);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "LSTM",
                      .name = kName,
                      .check = check,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu
