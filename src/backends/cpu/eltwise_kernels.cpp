// Element-wise ops on the CPU. Piecewise-linear activations and same-shape arithmetic are
// Kiln's own vector loops; transcendental activations use oneDNN's eltwise; the other unary ops
// here run their point function (ops/point_ops.hpp) in a loop over the buffer; arithmetic with a
// broadcast operand uses oneDNN's binary, or a plain broadcast loop for shapes it does not take.
// All of them may write in place over their first input (the memory planner relies on that).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "ops/op_utils.hpp"
#include "ops/point_ops.hpp"

namespace kiln::backends::cpu {
namespace {

using ops::Activation;
using ops::FusedActivation;

// Splits [0, n) over the threads in cache-friendly chunks; small n stays on this thread.
template <typename Fn>
void parallel_chunks(int64_t n, Fn&& fn) {
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// ---- unary ----

using PointLoop = void (*)(const float* x, float* y, int64_t n);

// y[i] = F(x[i]) computed in double and rounded once: exactly the op's reference kernel (which
// maps float32 through the same point function in double), without its allocation, in place
// and over the threads.
template <double (*F)(double)>
void point_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(F(static_cast<double>(x[i])));
}

struct UnaryOp {
  const char* op_type;
  // Own loop: the activation it computes (None when oneDNN's eltwise or `loop` does it).
  Activation own = Activation::None;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  PointLoop loop = nullptr;  // an op with neither: its point function over the buffer
};

constexpr UnaryOp kUnary[] = {
    {"Relu", Activation::Relu},
    {"LeakyRelu", Activation::LeakyRelu},
    {"Clip", Activation::Clip},
    {"HardSigmoid", Activation::HardSigmoid},
    {"HardSwish", Activation::HardSwish},
    {"Sigmoid", Activation::None, dnnl::algorithm::eltwise_logistic},
    {"Tanh", Activation::None, dnnl::algorithm::eltwise_tanh},
    {"Elu", Activation::None, dnnl::algorithm::eltwise_elu},
    {"Gelu", Activation::None, dnnl::algorithm::eltwise_gelu_erf},
    {"Exp", Activation::None, dnnl::algorithm::eltwise_exp},
    {"Sqrt", Activation::None, dnnl::algorithm::eltwise_sqrt},
    {"Abs", Activation::None, dnnl::algorithm::eltwise_abs},
    {"Neg", Activation::None, dnnl::algorithm::eltwise_linear},
    {"Mish", Activation::None, dnnl::algorithm::eltwise_mish},
    {"Softsign", Activation::None, dnnl::algorithm::undef, point_loop<point::softsign<double>>},
};

const UnaryOp* unary_op(const std::string& op_type) {
  for (const UnaryOp& u : kUnary) {
    if (op_type == u.op_type) return &u;
  }
  return nullptr;
}

std::string check_unary(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 0, 8); !why.empty()) return why;
  if (std::string why = check_f32_outputs(node); !why.empty()) return why;
  if (node.op_type() == "Clip") {
    for (size_t i = 1; i < node.inputs().size(); ++i) {
      if (!node.input(i)) continue;
      const Tensor* t = constant_input(node, i);
      if (!t || t->dtype() != DataType::Float32 || t->numel() != 1) {
        return "Clip bounds are not float32 constants";
      }
    }
  } else if (node.inputs().size() != 1) {
    return "more than one input";
  }
  if (node.op_type() == "Gelu") {
    std::string approx = ops::AttrReader(node).attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") return "unknown Gelu approximation";
  }
  return "";
}

class UnaryKernel final : public Kernel {
 public:
  explicit UnaryKernel(const ir::Node& node) : op_(*unary_op(node.op_type())) {
    ops::AttrReader attrs(node);
    const std::string& op = node.op_type();
    act_.kind = op_.own;
    if (op == "LeakyRelu") act_.alpha = attrs.attr_float("alpha", 0.01f);
    if (op == "HardSigmoid") {
      act_.alpha = attrs.attr_float("alpha", 0.2f);
      act_.beta = attrs.attr_float("beta", 0.5f);
    }
    if (op == "Clip") {
      float lo = -std::numeric_limits<float>::infinity();
      float hi = std::numeric_limits<float>::infinity();
      if (node.opset() < 11) {
        // Clip-6 defaults to the float range; Clip-1 had no bound.
        if (node.opset() >= 6) {
          lo = std::numeric_limits<float>::lowest();
          hi = std::numeric_limits<float>::max();
        }
        lo = attrs.attr_float("min", lo);
        hi = attrs.attr_float("max", hi);
      } else {
        if (const Tensor* t = constant_input(node, 1)) lo = t->data<float>()[0];
        if (const Tensor* t = constant_input(node, 2)) hi = t->data<float>()[0];
      }
      act_.alpha = lo;
      act_.beta = hi;
    }
    alg_ = op_.alg;
    if (op == "Elu") alpha_ = attrs.attr_float("alpha", 1.f);
    if (op == "Neg") alpha_ = -1.f;
    if (op == "Gelu" && attrs.attr_string("approximate", "none") == "tanh") {
      alg_ = dnnl::algorithm::eltwise_gelu_tanh;
    }
  }
  std::string_view name() const override { return "cpu.eltwise"; }
  // Element by element, so any layout works as long as input and output share it.
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    DeviceTensor y = out.allocate(0, DataType::Float32, x.dims);
    KILN_CHECK(x.layout == y.layout, ErrorCode::Internal, "cpu.eltwise: layouts {} -> {}",
               x.layout.to_string(), y.layout.to_string());
    const int64_t n = y.storage_numel();
    if (n == 0) return;
    const auto* px = static_cast<const float*>(x.data);
    auto* py = static_cast<float*>(y.data);
    if (op_.loop) {
      const PointLoop loop = op_.loop;
      parallel_chunks(n, [&](int64_t at, int64_t len) { loop(px + at, py + at, len); });
      return;
    }
    if (alg_ == dnnl::algorithm::undef) {
      const FusedActivation act = act_;
      parallel_chunks(
          n, [&](int64_t at, int64_t len) { apply_activation(act, px + at, py + at, len); });
      return;
    }
    if (!prim_ || n != prim_n_) {
      threads_ = threads_for_work(10.0 * static_cast<double>(n), 8.0 * static_cast<double>(n));
      ThreadLimit limit(threads_);
      dnnl::memory::desc md = plain_desc({n});
      auto pd = dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg_, md, alpha_, 0.f),
          engine());
      prim_ = dnnl::eltwise_forward(pd);
      md_ = md;
      prim_n_ = n;
    }
    ThreadLimit limit(threads_);
    prim_.execute(dnnl_stream(stream),
                  {{DNNL_ARG_SRC, wrap(md_, px)}, {DNNL_ARG_DST, wrap(md_, py)}});
  }

 private:
  UnaryOp op_;
  FusedActivation act_;
  dnnl::algorithm alg_;
  float alpha_ = 0.f;
  int threads_ = 1;  // threads_for_work of prim_n_ elements, held around prim_
  dnnl::eltwise_forward prim_;
  dnnl::memory::desc md_;
  int64_t prim_n_ = -1;
};

// ---- binary ----

std::optional<BinaryOp> binary_op(const std::string& op_type) {
  if (op_type == "Add") return BinaryOp::Add;
  if (op_type == "Sub") return BinaryOp::Sub;
  if (op_type == "Mul") return BinaryOp::Mul;
  if (op_type == "Div") return BinaryOp::Div;
  return std::nullopt;
}

std::string check_binary(const ir::Node& node) {
  if (node.inputs().size() != 2) return "not two inputs";
  if (std::string why = check_f32_input(node, 0, 0, 6); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 1, 0, 6); !why.empty()) return why;
  if (node.opset() < 7) return "legacy broadcast attribute semantics (opset < 7)";
  return check_f32_outputs(node);
}

class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(const ir::Node& node) : node_(node), op_(*binary_op(node.op_type())) {}
  std::string_view name() const override { return "cpu.binary"; }
  // Same-shape operands, element by element: any layout they share. Not Div: a blocked
  // tensor's padding channels would divide 0 by 0, and the NaN would reach the next conv.
  // A 4-D operand times a per-channel one ([N or 1, C, 1, 1], a squeeze-excitation scale): the
  // full operand and the output share a layout, padding lanes written as 0 (Div included).
  BlockedLayouts blocked_layouts() const override {
    const ir::Value* a = node_.input(0);
    const ir::Value* b = node_.input(1);
    if (!a || !b || !a->type().shape || !b->type().shape) return {};
    const Shape& sa = *a->type().shape;
    const Shape& sb = *b->type().shape;
    if (known_dims(sa) && sa == sb) return {.uniform = op_ != BinaryOp::Div};
    if (const int full = per_channel_full_operand(node_); full >= 0) return {.follows = full};
    return {};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    ops::AttrReader attrs(node_);
    std::vector<int64_t> dims = ops::broadcast_dims(attrs, {a.dims, b.dims});
    DeviceTensor y = out.allocate(0, DataType::Float32, dims);
    if (y.numel() == 0) return;
    if (a.layout != b.layout) {
      const bool a_blocked = !a.layout.is_row_major();
      run_per_channel(a_blocked ? a : b, a_blocked ? b : a, !a_blocked, y);
      return;
    }
    if (!a.layout.is_row_major() || !b.layout.is_row_major() || !y.layout.is_row_major()) {
      KILN_CHECK(a.dims == b.dims && a.layout == b.layout && a.layout == y.layout,
                 ErrorCode::Internal,
                 "node {}: blocked operands {} / {} of different shapes or layouts", node_.label(),
                 dims_to_string(a.dims), dims_to_string(b.dims));
    }
    const int64_t n = y.storage_numel();
    const auto* pa = static_cast<const float*>(a.data);
    const auto* pb = static_cast<const float*>(b.data);
    auto* py = static_cast<float*>(y.data);
    const BinaryOp op = op_;
    const bool commutes = op == BinaryOp::Add || op == BinaryOp::Mul;
    if (a.dims == b.dims || (a.dims == dims && b.numel() == 1) ||
        (commutes && b.dims == dims && a.numel() == 1)) {
      const bool swap = a.dims != dims;
      const float* first = swap ? pb : pa;
      const float* second = swap ? pa : pb;
      const bool scalar = a.dims != b.dims;
      parallel_chunks(n, [&](int64_t at, int64_t len) {
        binary_same_shape(op, first + at, scalar ? second : second + at, scalar, py + at, len);
      });
      return;
    }
    if (a.dims == dims || (commutes && b.dims == dims)) {
      const bool swap = a.dims != dims;
      run_onednn(swap ? b : a, swap ? a : b, y, stream);
      return;
    }
    // Both operands broadcast (a column plus a row, say): the general strided loop.
    std::array<std::vector<int64_t>, 2> strides = {ops::broadcast_strides(a.dims, dims),
                                                   ops::broadcast_strides(b.dims, dims)};
    ops::for_each_broadcast<2>(dims, strides, [&](int64_t i, const std::array<int64_t, 2>& o) {
      binary_same_shape(op, pa + o[0], pb + o[1], false, py + i, 1);
    });
  }

 private:
  // `full` blocked (N, C/b, H, W, b), `other` row-major per channel; `swapped`: other is input 0.
  void run_per_channel(const DeviceTensor& full, const DeviceTensor& other, bool swapped,
                       const DeviceTensor& y) {
    KILN_CHECK(y.layout == full.layout && y.dims == full.dims && full.dims.size() == 4 &&
                   other.numel() > 0 && other.numel() % full.dims[1] == 0 &&
                   (other.numel() == full.dims[1] || other.numel() == full.dims[0] * full.dims[1]),
               ErrorCode::Internal, "node {}: per-channel operands {} / {} in layouts {} / {}",
               node_.label(), dims_to_string(full.dims), dims_to_string(other.dims),
               full.layout.to_string(), other.layout.to_string());
    const int64_t n = full.dims[0], c = full.dims[1], hw = full.dims[2] * full.dims[3];
    const int64_t b = full.layout.block, cb = (c + b - 1) / b;
    const bool per_batch = other.numel() != c;
    const auto* pf = static_cast<const float*>(full.data);
    const auto* po = static_cast<const float*>(other.data);
    auto* py = static_cast<float*>(y.data);
    const BinaryOp op = op_;
    // Threads by the elements' work, as oneDNN's path takes them (the test here had counted
    // channel blocks times pixels, 1/16 of the elements, so EfficientNet's squeeze-and-excite
    // Muls of 0.1-0.5 M elements ran on one thread at 2).
    const double elements = static_cast<double>(n * cb * hw * b);
    const int threads = threads_for_work(elements, 12.0 * elements);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < n * cb; ++i) {
      const int64_t nn = i / cb, c0 = (i % cb) * b;
      const int64_t lanes = std::min(b, c - c0);
      float ov[64] = {};
      for (int64_t l = 0; l < lanes; ++l) ov[l] = po[(per_batch ? nn * c : 0) + c0 + l];
      blocked_channel_binary(op, pf + i * hw * b, ov, swapped, hw, static_cast<int>(b),
                             static_cast<int>(lanes), py + i * hw * b);
    }
  }

  void run_onednn(const DeviceTensor& full, const DeviceTensor& other, const DeviceTensor& y,
                  Stream& stream) {
    if (!prim_ || full.dims != full_dims_ || other.dims != other_dims_) {
      const double n = static_cast<double>(shape_numel(full.dims));
      threads_ = threads_for_work(n, 12.0 * n);
      ThreadLimit limit(threads_);
      std::vector<int64_t> od = other.dims;
      od.insert(od.begin(), full.dims.size() - od.size(), 1);
      static constexpr dnnl::algorithm kAlg[] = {
          dnnl::algorithm::binary_add, dnnl::algorithm::binary_sub, dnnl::algorithm::binary_mul,
          dnnl::algorithm::binary_div};
      full_md_ = plain_desc(full.dims);
      other_md_ = plain_desc(od);
      auto pd = dnnl::binary::primitive_desc(
          dnnl::binary::desc(kAlg[static_cast<int>(op_)], full_md_, other_md_, full_md_), engine());
      prim_ = dnnl::binary(pd);
      full_dims_ = full.dims;
      other_dims_ = other.dims;
    }
    ThreadLimit limit(threads_);
    prim_.execute(dnnl_stream(stream), {{DNNL_ARG_SRC_0, wrap(full_md_, full.data)},
                                        {DNNL_ARG_SRC_1, wrap(other_md_, other.data)},
                                        {DNNL_ARG_DST, wrap(full_md_, y.data)}});
  }

  const ir::Node& node_;
  BinaryOp op_;
  dnnl::binary prim_;
  int threads_ = 1;  // threads_for_work of full_dims_, held around prim_
  dnnl::memory::desc full_md_, other_md_;
  std::vector<int64_t> full_dims_, other_dims_;
};

std::unique_ptr<Kernel> create_unary(const ir::Node& node) {
  return std::make_unique<UnaryKernel>(node);
}
std::unique_ptr<Kernel> create_binary(const ir::Node& node) {
  return std::make_unique<BinaryKernel>(node);
}

// ---- Sum ----

// Operands of one declared shape (broadcasting Sums stay on the reference kernel).
std::string check_sum(const ir::Node& node) {
  if (node.inputs().empty()) return "no inputs";
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    if (std::string why = check_f32_input(node, i, 0, 8); !why.empty()) return why;
    const Shape& s = *node.input(i)->type().shape;
    if (!known_dims(s) || !(s == *node.input(0)->type().shape)) {
      return "operands of different or unnamed dynamic shapes";
    }
  }
  return check_f32_outputs(node);
}

class SumKernel final : public Kernel {
 public:
  explicit SumKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.sum"; }
  // Element by element on one shape: any layout the operands share (padding stays 0 + 0).
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    for (const DeviceTensor& t : in) {
      KILN_CHECK_ARG(t.dims == in[0].dims, "node {}: operands {} and {} differ in shape",
                     node_.label(), dims_to_string(in[0].dims), dims_to_string(t.dims));
    }
    DeviceTensor y = out.allocate(0, DataType::Float32, in[0].dims);
    const int64_t n = y.storage_numel();
    auto* py = static_cast<float*>(y.data);
    parallel_chunks(n, [&](int64_t at, int64_t len) {
      const auto* first = static_cast<const float*>(in[0].data) + at;
      if (in.size() == 1) {
        std::copy(first, first + len, py + at);
        return;
      }
      binary_same_shape(BinaryOp::Add, first, static_cast<const float*>(in[1].data) + at, false,
                        py + at, len);
      for (size_t k = 2; k < in.size(); ++k) {
        binary_same_shape(BinaryOp::Add, py + at, static_cast<const float*>(in[k].data) + at, false,
                          py + at, len);
      }
    });
  }

 private:
  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_sum(const ir::Node& node) {
  return std::make_unique<SumKernel>(node);
}

}  // namespace

// Element by element, each input element read before the output element at its index is
// written: output 0 may take input 0's memory.
#define KILN_CPU_UNARY(OP)                      \
  KILN_REGISTER_KERNEL({.backend = "cpu",       \
                        .op_type = OP,          \
                        .name = "cpu.eltwise",  \
                        .in_place_inputs = {0}, \
                        .check = check_unary,   \
                        .create = create_unary})
KILN_CPU_UNARY("Relu");
KILN_CPU_UNARY("LeakyRelu");
KILN_CPU_UNARY("Clip");
KILN_CPU_UNARY("HardSigmoid");
KILN_CPU_UNARY("HardSwish");
KILN_CPU_UNARY("Sigmoid");
KILN_CPU_UNARY("Tanh");
KILN_CPU_UNARY("Elu");
KILN_CPU_UNARY("Gelu");
// ai.kiln Gelu (the fusion of the exporters' erf and tanh forms), where no MatMul takes it into
// its epilogue: after a dynamic INT8 product's rescale, say.
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "Gelu",
                      .name = "cpu.eltwise",
                      .in_place_inputs = {0},
                      .check = check_unary,
                      .create = create_unary});
KILN_CPU_UNARY("Exp");
KILN_CPU_UNARY("Sqrt");
KILN_CPU_UNARY("Abs");
KILN_CPU_UNARY("Neg");
KILN_CPU_UNARY("Mish");
KILN_CPU_UNARY("Softsign");

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Sum",
                      .name = "cpu.sum",
                      .check = check_sum,
                      .create = create_sum});

// Output 0 may take the memory of an operand of its own shape: the loops read element by element
// in output order, and oneDNN's binary primitive computes in place over its first source. Add
// and Mul pass a full-shape second operand as that first source (they commute); Sub and Div
// never do, so they declare input 0 only.
#define KILN_CPU_BINARY(OP, ...)                        \
  KILN_REGISTER_KERNEL({.backend = "cpu",               \
                        .op_type = OP,                  \
                        .name = "cpu.binary",           \
                        .in_place_inputs = __VA_ARGS__, \
                        .check = check_binary,          \
                        .create = create_binary})
KILN_CPU_BINARY("Add", {0, 1});
KILN_CPU_BINARY("Sub", {0});
KILN_CPU_BINARY("Mul", {0, 1});
KILN_CPU_BINARY("Div", {0});

}  // namespace kiln::backends::cpu
