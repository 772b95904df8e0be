// Float16 nodes on the CPU (and the bfloat16 nodes of `--bf16` engines that have no bfloat16
// kernel: convolutions and matrix products do, in conv_kernels.cpp / matmul_kernels.cpp):
// computed in float32, stored in 16 bits. This CPU has no float16 arithmetic worth using (no
// AVX512-FP16) and Debian's oneDNN 2.6 has no f16 convolution or matmul for it, so each such
// node runs the float32 kernel of a float32 twin of itself:
// activations are widened into scratch buffers with the F16C / AVX-512 conversion instructions
// on the way in and rounded once on the way out; constant inputs (weights) are widened once at
// open. Ops without a fast float32 kernel run their reference kernel in float32 the same way,
// so normalizations and Softmax never hold their statistics in float16.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/kernel_table.hpp"
#include "core/half_convert.hpp"
#include "ops/registry.hpp"

namespace kiln::backends::cpu {
namespace {

// The kernel's name for each 16-bit type it stores (the Cast kernel below keeps the first).
constexpr const char* kName = "cpu.fp16";
constexpr const char* kBf16Name = "cpu.bf16";

const char* name_for(DataType half) {
  return half == DataType::BFloat16 ? kBf16Name : kName;
}

bool is_half(const ir::Value* v, DataType half) {
  return v && v->type().is_tensor() && v->type().dtype == half;
}

// Conversions of large tensors are split over the threads (memory bound, but one core does not
// saturate the bandwidth).
void to_floats(const void* in, float* out, int64_t n, DataType half) {
  constexpr int64_t kChunk = 1 << 16;
  const auto* h = static_cast<const uint16_t*>(in);
  const auto convert = half == DataType::BFloat16 ? bfloat16s_to_floats : halves_to_floats;
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t at = 0; at < n; at += kChunk) {
    convert(h + at, out + at, static_cast<size_t>(std::min(kChunk, n - at)));
  }
}

void to_halves(const float* in, void* out, int64_t n, DataType half) {
  constexpr int64_t kChunk = 1 << 16;
  auto* h = static_cast<uint16_t*>(out);
  const auto convert = half == DataType::BFloat16 ? floats_to_bfloat16s : floats_to_halves;
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t at = 0; at < n; at += kChunk) {
    convert(in + at, h + at, static_cast<size_t>(std::min(kChunk, n - at)));
  }
}

Tensor widen(const Tensor& t) {
  Tensor out(DataType::Float32, t.dims());
  to_floats(t.raw_data(), out.data<float>(), t.numel(), t.dtype());
  return out;
}

// The node with every float16 value float32: same op, attributes and opset; constant inputs
// become initializers holding their float32 data, so float32 kernels that read constants at
// open (Clip bounds, Gemm's C) see them.
struct Twin {
  std::unique_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  std::vector<const Tensor*> constants;  // per input slot, the twin's float32 constant
};

Twin make_twin(const ir::Node& node, DataType half) {
  Twin t;
  t.graph = std::make_unique<ir::Graph>("fp16_twin");
  if (node.owner()) t.graph->opsets() = node.owner()->opsets();
  auto widened = [half](TypeInfo type) {
    if (type.is_tensor() && type.dtype == half) type.dtype = DataType::Float32;
    return type;
  };
  std::vector<ir::Value*> ins, outs;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const ir::Value* v = node.input(i);
    if (!v) {
      ins.push_back(nullptr);
      t.constants.push_back(nullptr);
      continue;
    }
    std::string name = fmt::format("in{}", i);
    if (const Tensor* c = constant_input(node, i)) {
      ir::Value* w = t.graph->add_initializer(name, c->dtype() == half ? widen(*c) : *c);
      ins.push_back(w);
      t.constants.push_back(&w->constant());
    } else {
      ins.push_back(t.graph->add_input(name, widened(v->type())));
      t.constants.push_back(nullptr);
    }
  }
  for (size_t k = 0; k < node.outputs().size(); ++k) {
    const ir::Value* v = node.output(k);
    outs.push_back(v ? t.graph->add_value(fmt::format("out{}", k), widened(v->type())) : nullptr);
  }
  t.node = t.graph->add_node(node.op_type(), node.domain(), node.name(), ins, outs);
  t.node->set_opset(node.opset());
  for (const auto& [name, a] : node.attributes()) t.node->set_attribute(name, a);
  for (ir::Value* o : outs) {
    if (o) t.graph->add_output(o);
  }
  return t;
}

bool has_half_value(const ir::Node& node, DataType half) {
  for (const ir::Value* v : node.inputs()) {
    if (is_half(v, half)) return true;
  }
  for (const ir::Value* v : node.outputs()) {
    if (is_half(v, half)) return true;
  }
  return false;
}

// The float32 kernel that will do the work for `twin`, or "" for its reference kernel.
std::string inner_kernel(const ir::Node& twin) {
  Support s = KernelTable::instance().select(CpuBackend::instance(), twin);
  return s.ok() && s.kernel != kName && s.kernel != kBf16Name ? s.kernel : "";
}

// The 16-bit type a node stores (float16 takes precedence: a node mixing both is not one the
// passes make, and float16's twin leaves a bfloat16 value as it is).
DataType half_of(const ir::Node& node) {
  return has_half_value(node, DataType::Float16) ? DataType::Float16 : DataType::BFloat16;
}

std::string check_half(const ir::Node& node, DataType half) {
  if (!has_half_value(node, half)) {
    return half == DataType::BFloat16 ? "no bfloat16 values" : "no float16 values";
  }
  if (half == DataType::BFloat16 && has_half_value(node, DataType::Float16)) {
    return "float16 and bfloat16 values";
  }
  for (const ir::Value* v : node.inputs()) {
    if (v && !v->type().is_tensor()) return "a non-tensor input";
  }
  if (!ops::OpRegistry::instance().find(node.domain(), node.op_type(), node.opset()))
    return "no reference kernel";
  return "";
}

std::string check_fp16(const ir::Node& node) {
  return check_half(node, DataType::Float16);
}
std::string check_bf16(const ir::Node& node) {
  return check_half(node, DataType::BFloat16);
}

// Grow-only float32 buffers, per thread (runs of one session are serialized, sessions may run
// on several threads): the widened inputs and the float32 outputs of the node running now.
class Scratch {
 public:
  float* get(size_t slot, int64_t n) {
    if (slot >= buffers_.size()) buffers_.resize(slot + 1);
    Buffer& b = buffers_[slot];
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
    if (b.bytes < bytes) {
      b.data.reset();
      size_t rounded = (bytes + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, rounded);
      KILN_CHECK(p, ErrorCode::Unavailable, "out of memory allocating {} bytes", rounded);
      b.data.reset(static_cast<float*>(p));
      b.bytes = rounded;
    }
    return b.data.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  struct Buffer {
    std::unique_ptr<float, Free> data;
    size_t bytes = 0;
  };
  std::vector<Buffer> buffers_;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Hands the inner float32 kernel scratch memory for the outputs the node stores as float16,
// and the real output for the others.
class WideningOutputs final : public KernelOutputs {
 public:
  WideningOutputs(KernelOutputs& real, const std::vector<bool>& half, DataType half_type,
                  size_t first_slot)
      : real_(real),
        half_(half),
        half_type_(half_type),
        first_slot_(first_slot),
        pending_(half.size()) {}

  DeviceTensor allocate(size_t index, DataType dtype, std::vector<int64_t> dims) override {
    if (index >= half_.size() || !half_[index] || dtype != DataType::Float32)
      return real_.allocate(index, dtype, std::move(dims));
    DeviceTensor t{DataType::Float32, dims, nullptr};
    t.data = scratch().get(first_slot_ + index, shape_numel(dims));
    pending_[index] = t;
    return t;
  }

  // Rounds every float32 result into the float16 output.
  void finish() {
    for (size_t k = 0; k < pending_.size(); ++k) {
      if (!pending_[k].defined()) continue;
      DeviceTensor y = real_.allocate(k, half_type_, pending_[k].dims);
      to_halves(static_cast<const float*>(pending_[k].data), y.data, y.numel(), half_type_);
    }
  }

 private:
  KernelOutputs& real_;
  const std::vector<bool>& half_;
  DataType half_type_;
  size_t first_slot_;
  std::vector<DeviceTensor> pending_;
};

class Fp16Kernel final : public Kernel {
 public:
  explicit Fp16Kernel(const ir::Node& node) : half_(half_of(node)), twin_(make_twin(node, half_)) {
    for (const ir::Value* v : node.outputs()) half_out_.push_back(is_half(v, half_));
    std::string inner = inner_kernel(*twin_.node);
    if (!inner.empty()) {
      try {
        inner_ = CpuBackend::instance().create_kernel(*twin_.node, inner);
      } catch (const Error&) {
        inner_.reset();  // the reference kernel below still runs it
      }
    }
    if (!inner_) {
      def_ = &ops::OpRegistry::instance().get(node.domain(), node.op_type(), node.opset());
    }
  }
  std::string_view name() const override { return name_for(half_); }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    std::vector<DeviceTensor> wide(in.begin(), in.end());
    for (size_t i = 0; i < wide.size(); ++i) {
      if (in[i].dtype != half_) continue;
      wide[i].dtype = DataType::Float32;
      const Tensor* c = i < twin_.constants.size() ? twin_.constants[i] : nullptr;
      if (c && c->dims() == in[i].dims) {
        wide[i].data = const_cast<void*>(c->raw_data());
      } else {
        float* buf = scratch().get(i, in[i].numel());
        to_floats(in[i].data, buf, in[i].numel(), half_);
        wide[i].data = buf;
      }
    }
    if (inner_) {
      WideningOutputs outputs(out, half_out_, half_, wide.size());
      inner_->run(wide, outputs, stream);
      outputs.finish();
      return;
    }
    run_reference(wide, out);
  }

 private:
  void run_reference(const std::vector<DeviceTensor>& wide, KernelOutputs& out) {
    std::vector<RtValue> values(wide.size());
    std::vector<const RtValue*> ptrs(wide.size(), nullptr);
    for (size_t i = 0; i < wide.size(); ++i) {
      if (!wide[i].defined()) continue;
      values[i] = RtValue(Tensor::view(wide[i].dtype, wide[i].dims, wide[i].data, nullptr));
      ptrs[i] = &values[i];
    }
    std::vector<RtValue> results(twin_.node->outputs().size());
    ops::KernelContext ctx(*twin_.node, ptrs, results, nullptr);
    def_->kernel(ctx);
    for (size_t k = 0; k < results.size(); ++k) {
      if (!twin_.node->output(k) || !results[k].is_tensor()) continue;
      const Tensor& t = results[k].tensor();
      if (half_out_[k] && t.dtype() == DataType::Float32) {
        DeviceTensor y = out.allocate(k, half_, t.dims());
        to_halves(t.data<float>(), y.data, y.numel(), half_);
      } else {
        DeviceTensor y = out.allocate(k, t.dtype(), t.dims());
        if (t.nbytes()) std::memcpy(y.data, t.raw_data(), t.nbytes());
      }
    }
  }

  DataType half_;  // the 16-bit type this node stores
  Twin twin_;
  std::vector<bool> half_out_;
  std::unique_ptr<Kernel> inner_;
  const ops::OpDef* def_ = nullptr;
};

std::unique_ptr<Kernel> create_fp16(const ir::Node& node) {
  return std::make_unique<Fp16Kernel>(node);
}

// Cast between float32 and float16 (the pass puts one at every precision boundary) with the
// conversion instructions; other Casts run the reference kernel.
std::string check_cast(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  const ir::Value* y = node.output(0);
  if (!x || !y || !x->type().is_tensor() || !y->type().is_tensor()) return "not a tensor Cast";
  const DataType from = x->type().dtype, to = y->type().dtype;
  const auto half = [](DataType t) { return t == DataType::Float16 || t == DataType::BFloat16; };
  if ((from == DataType::Float32 && half(to)) || (half(from) && to == DataType::Float32)) return "";
  return "not a float32 <-> float16 / bfloat16 Cast";
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const ir::Node& node) : to_(node.output(0)->type().dtype) {}
  std::string_view name() const override { return kName; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    DeviceTensor y = out.allocate(0, to_, x.dims);
    if (x.dtype == to_) {
      if (y.data != x.data) std::memcpy(y.data, x.data, x.nbytes());
    } else if (to_ != DataType::Float32) {
      to_halves(static_cast<const float*>(x.data), y.data, x.numel(), to_);
    } else {
      to_floats(x.data, static_cast<float*>(y.data), x.numel(), x.dtype);
    }
  }

 private:
  DataType to_;
};

std::unique_ptr<Kernel> create_cast(const ir::Node& node) {
  return std::make_unique<CastKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Cast",
                      .name = kName,
                      .check = check_cast,
                      .create = create_cast});

// The float16 nodes the fp16 pass produces that do arithmetic: those with a fast float32
// kernel, and the normalizations / Softmax / attention, whose reference kernels are then run in
// float32. Data movement (Reshape, Transpose, Concat, ...) runs its reference kernel on the
// float16 data directly: it does no arithmetic, so widening would only cost time. This is a
// choice of the CPU backend, not a fact about the ops: which ops may be float16 at all is their
// `fp16` trait (ops/op_traits.hpp); this list is the subset the CPU computes in float32.
// Each op twice: for float16 nodes, and for bfloat16 ones below the kernels that compute in
// bfloat16 (priority -1: oneDNN's bfloat16 convolution and matmul come first).
#define KILN_CPU_FP16(DOMAIN, OP)                \
  KILN_REGISTER_KERNEL({.backend = "cpu",        \
                        .domain = DOMAIN,        \
                        .op_type = OP,           \
                        .name = kName,           \
                        .check = check_fp16,     \
                        .create = create_fp16}); \
  KILN_REGISTER_KERNEL({.backend = "cpu",        \
                        .domain = DOMAIN,        \
                        .op_type = OP,           \
                        .name = kBf16Name,       \
                        .priority = -1,          \
                        .check = check_bf16,     \
                        .create = create_fp16})
// Element-wise ops: every 16-bit input is widened into scratch and the result rounded into the
// output only after the float32 kernel ran, so output 0 may take those inputs' memory.
#define KILN_CPU_FP16_IN_PLACE(OP, ...)                 \
  KILN_REGISTER_KERNEL({.backend = "cpu",               \
                        .op_type = OP,                  \
                        .name = kName,                  \
                        .in_place_inputs = __VA_ARGS__, \
                        .check = check_fp16,            \
                        .create = create_fp16});        \
  KILN_REGISTER_KERNEL({.backend = "cpu",               \
                        .op_type = OP,                  \
                        .name = kBf16Name,              \
                        .priority = -1,                 \
                        .in_place_inputs = __VA_ARGS__, \
                        .check = check_bf16,            \
                        .create = create_fp16})
KILN_CPU_FP16("", "Conv");
KILN_CPU_FP16("ai.kiln", "FusedConv");
KILN_CPU_FP16("", "MatMul");
KILN_CPU_FP16("ai.kiln", "FusedMatMul");
KILN_CPU_FP16("", "Gemm");
KILN_CPU_FP16("ai.kiln", "FusedGemm");
KILN_CPU_FP16("", "MaxPool");
KILN_CPU_FP16("", "AveragePool");
KILN_CPU_FP16("", "GlobalAveragePool");
KILN_CPU_FP16("", "GlobalMaxPool");
KILN_CPU_FP16_IN_PLACE("Relu", {0});
KILN_CPU_FP16_IN_PLACE("LeakyRelu", {0});
KILN_CPU_FP16_IN_PLACE("Clip", {0});
KILN_CPU_FP16_IN_PLACE("HardSigmoid", {0});
KILN_CPU_FP16_IN_PLACE("HardSwish", {0});
KILN_CPU_FP16_IN_PLACE("Sigmoid", {0});
KILN_CPU_FP16_IN_PLACE("Tanh", {0});
KILN_CPU_FP16_IN_PLACE("Elu", {0});
KILN_CPU_FP16_IN_PLACE("Gelu", {0});
KILN_CPU_FP16("ai.kiln", "Gelu");
KILN_CPU_FP16_IN_PLACE("Sqrt", {0});
KILN_CPU_FP16_IN_PLACE("Abs", {0});
KILN_CPU_FP16_IN_PLACE("Neg", {0});
KILN_CPU_FP16_IN_PLACE("Mish", {0});
KILN_CPU_FP16_IN_PLACE("Add", {0, 1});
KILN_CPU_FP16_IN_PLACE("Sub", {0});
KILN_CPU_FP16_IN_PLACE("Mul", {0, 1});
KILN_CPU_FP16_IN_PLACE("Div", {0});
KILN_CPU_FP16("", "Softmax");
KILN_CPU_FP16("", "LayerNormalization");
KILN_CPU_FP16("ai.kiln", "LayerNormalization");
KILN_CPU_FP16("ai.kiln", "SkipLayerNormalization");
KILN_CPU_FP16("ai.kiln", "ScaledDotProductAttention");
KILN_CPU_FP16("", "BatchNormalization");
KILN_CPU_FP16("", "ReduceMean");

}  // namespace kiln::backends::cpu
