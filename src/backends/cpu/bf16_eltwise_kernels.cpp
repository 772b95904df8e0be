// Element-wise bfloat16 kernels for `--bf16` engines: Relu, and Add / Sub / Mul of two operands
// of one shape (a CNN's residual joins). Without them these nodes run on the widening twin
// (fp16_kernels.cpp), which can read only row-major tensors: the convolutions around them then
// reorder their outputs out of oneDNN's blocked layout and back, and the twin widens the whole
// tensor into scratch first (ResNet-50 b1: its 16 Adds were 19 % of a bfloat16 run). Here the
// operands are read in whatever layout they share, padding included (0 + 0 and relu(0) keep it
// zero), a chunk at a time through registers-sized float32 buffers, and the result may overwrite
// an operand.
#include <algorithm>

#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "core/half.hpp"
#include "core/half_convert.hpp"

namespace kiln::backends::cpu {
namespace {

constexpr const char* kName = "cpu.bf16_eltwise";

bool is_bf16(const ir::Value* v) {
  return v && v->type().is_tensor() && v->type().dtype == DataType::BFloat16 && v->type().shape;
}

std::string check_same_shape(const ir::Node& node) {
  if (!cpu_has_bf16()) return "this CPU has no bfloat16 instructions";
  const ir::Value* y = node.output(0);
  if (!is_bf16(y) || node.outputs().size() != 1) return "output 0 is not a bfloat16 tensor";
  for (const ir::Value* v : node.inputs()) {
    if (!is_bf16(v)) return "an input is not a bfloat16 tensor";
    // One declared shape with every dim known or named: equal at run time too (checked there).
    if (!known_dims(*v->type().shape) || !(*v->type().shape == *y->type().shape)) {
      return "operands of different or unnamed dynamic shapes";
    }
  }
  return "";
}

// [0, n) over the threads in chunks that stay in the cache; small n on this thread.
template <typename Fn>
void parallel_chunks(int64_t n, Fn&& fn) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

std::string check_per_channel(const ir::Node& node) {
  if (!cpu_has_bf16()) return "this CPU has no bfloat16 instructions";
  const int full = per_channel_full_operand(node);
  if (full < 0) return "operands neither of one shape nor one scaling the other per channel";
  const ir::Value* y = node.output(0);
  if (!is_bf16(y) || node.outputs().size() != 1) return "output 0 is not a bfloat16 tensor";
  for (const ir::Value* v : node.inputs()) {
    if (!is_bf16(v)) return "an input is not a bfloat16 tensor";
  }
  if (!(*y->type().shape == *node.input(full)->type().shape)) {
    return "the output's shape is not the full operand's";
  }
  return "";
}

enum class Op { Add, Sub, Mul };

class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const ir::Node& node, Op op)
      : node_(node),
        op_(op),
        per_channel_full_(check_same_shape(node).empty() ? -1 : per_channel_full_operand(node)) {}
  std::string_view name() const override { return kName; }
  // Same-shape operands in any layout they share; a per-channel operand row-major beside a full
  // one whose layout the output takes (its padding lanes written as 0).
  BlockedLayouts blocked_layouts() const override {
    if (per_channel_full_ >= 0) return {.follows = per_channel_full_};
    return {.uniform = true};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    if (per_channel_full_ >= 0) {
      run_per_channel(in[per_channel_full_], in[1 - per_channel_full_], per_channel_full_ == 1,
                      out);
      return;
    }
    KILN_CHECK_ARG(in[0].dims == in[1].dims, "node {}: operands {} and {} differ in shape",
                   node_.label(), dims_to_string(in[0].dims), dims_to_string(in[1].dims));
    DeviceTensor y = out.allocate(0, DataType::BFloat16, in[0].dims);
    const auto* a = static_cast<const uint16_t*>(in[0].data);
    const auto* b = static_cast<const uint16_t*>(in[1].data);
    auto* py = static_cast<uint16_t*>(y.data);
    parallel_chunks(y.storage_numel(), [&](int64_t at, int64_t len) {
      constexpr int64_t kStep = 256;
      float fa[kStep], fb[kStep];
      for (int64_t i = at; i < at + len; i += kStep) {
        const size_t m = static_cast<size_t>(std::min(kStep, at + len - i));
        bfloat16s_to_floats(a + i, fa, m);
        bfloat16s_to_floats(b + i, fb, m);
        switch (op_) {
          case Op::Add:
            for (size_t k = 0; k < m; ++k) fa[k] += fb[k];
            break;
          case Op::Sub:
            for (size_t k = 0; k < m; ++k) fa[k] -= fb[k];
            break;
          case Op::Mul:
            for (size_t k = 0; k < m; ++k) fa[k] *= fb[k];
            break;
        }
        floats_to_bfloat16s(fa, py + i, m);
      }
    });
  }

 private:
  // `full` (N, C, H, W) row-major or channel-blocked, `other` N or 1 times C values row-major;
  // `swapped`: other is input 0.
  void run_per_channel(const DeviceTensor& full, const DeviceTensor& other, bool swapped,
                       KernelOutputs& out) {
    KILN_CHECK_ARG(
        full.dims.size() == 4 && other.numel() > 0 &&
            (other.numel() == full.dims[1] || other.numel() == full.dims[0] * full.dims[1]),
        "node {}: operands {} and {} are not a tensor and a per-channel operand", node_.label(),
        dims_to_string(full.dims), dims_to_string(other.dims));
    DeviceTensor y = out.allocate(0, DataType::BFloat16, full.dims);
    KILN_CHECK(y.layout == full.layout && other.layout.is_row_major(), ErrorCode::Internal,
               "node {}: per-channel operands in layouts {} / {}, the result in {}", node_.label(),
               full.layout.to_string(), other.layout.to_string(), y.layout.to_string());
    if (y.numel() == 0) return;
    const int64_t n = full.dims[0], c = full.dims[1], hw = full.dims[2] * full.dims[3];
    const int64_t b = full.layout.is_row_major() ? 1 : full.layout.block;
    const int64_t cb = (c + b - 1) / b;
    const bool per_batch = other.numel() != c;
    const auto* pf = static_cast<const uint16_t*>(full.data);
    const auto* po = static_cast<const uint16_t*>(other.data);
    auto* py = static_cast<uint16_t*>(y.data);
    static constexpr BinaryOp kOps[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul};
    const BinaryOp op = kOps[static_cast<int>(op_)];
    constexpr int64_t kStep = 1024;
    const int64_t rows_per_step = std::max<int64_t>(1, kStep / b);
    const double elements = static_cast<double>(n * cb * hw * b);
    const int threads = threads_for_work(elements, 6.0 * elements);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < n * cb; ++i) {
      const int64_t nn = i / cb, c0 = (i % cb) * b;
      const int64_t lanes = std::min(b, c - c0);
      float ov[64] = {}, buf[kStep];
      bfloat16s_to_floats(po + (per_batch ? nn * c : 0) + c0, ov, static_cast<size_t>(lanes));
      for (int64_t r = 0; r < hw; r += rows_per_step) {
        const int64_t rows = std::min(rows_per_step, hw - r);
        const auto m = static_cast<size_t>(rows * b);
        const int64_t at = (i * hw + r) * b;
        bfloat16s_to_floats(pf + at, buf, m);
        if (b == 1 && !(swapped && op == BinaryOp::Sub)) {
          // A row-major plane: one scalar for all of it (Add and Mul commute).
          binary_same_shape(op, buf, ov, true, buf, static_cast<int64_t>(m));
        } else {
          blocked_channel_binary(op, buf, ov, swapped, rows, static_cast<int>(b),
                                 static_cast<int>(lanes), buf);
        }
        floats_to_bfloat16s(buf, py + at, m);
      }
    }
  }

  const ir::Node& node_;
  Op op_;
  int per_channel_full_;  // the full operand of a per-channel node, else -1
};

// max(x, 0) on the bits: a negative value (sign set, not NaN) becomes +0; NaN stays NaN.
class ReluKernel final : public Kernel {
 public:
  std::string_view name() const override { return kName; }
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    DeviceTensor y = out.allocate(0, DataType::BFloat16, in[0].dims);
    const auto* x = static_cast<const uint16_t*>(in[0].data);
    auto* py = static_cast<uint16_t*>(y.data);
    parallel_chunks(y.storage_numel(), [&](int64_t at, int64_t len) {
      for (int64_t i = at; i < at + len; ++i) {
        const uint16_t v = x[i];
        const bool negative = (v & 0x8000u) && (v & 0x7fffu) <= 0x7f80u;
        py[i] = negative ? uint16_t{0} : v;
      }
    });
  }
};

std::string check_relu(const ir::Node& node) {
  if (node.inputs().size() != 1) return "Relu takes one input";
  return check_same_shape(node);
}

std::string check_binary(const ir::Node& node) {
  if (node.inputs().size() != 2) return "not two inputs";
  std::string why = check_same_shape(node);
  if (why.empty()) return why;
  if (std::string per_channel = check_per_channel(node); per_channel.empty()) return "";
  return why;
}

}  // namespace

// Each output element is computed from the operands' elements at its index after they are read:
// output 0 may take an operand's memory.
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Relu",
                      .name = kName,
                      .in_place_inputs = {0},
                      .check = check_relu,
                      .create = [](const ir::Node&) { return std::make_unique<ReluKernel>(); }});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Add",
                      .name = kName,
                      .in_place_inputs = {0, 1},
                      .check = check_binary,
                      .create = [](const ir::Node& n) {
                        return std::make_unique<BinaryKernel>(n, Op::Add);
                      }});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Sub",
                      .name = kName,
                      .in_place_inputs = {0},
                      .check = check_binary,
                      .create = [](const ir::Node& n) {
                        return std::make_unique<BinaryKernel>(n, Op::Sub);
                      }});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Mul",
                      .name = kName,
                      .in_place_inputs = {0, 1},
                      .check = check_binary,
                      .create = [](const ir::Node& n) {
                        return std::make_unique<BinaryKernel>(n, Op::Mul);
                      }});

}  // namespace kiln::backends::cpu
