// The GPU backend's element-wise kernels as kernel-table entries under "gpu": every unary op
// with a point function (parameters from the node's attributes, Clip's bounds from constants)
// and the binary Add, Sub, Mul, Div, Pow, Max and Min (two inputs) with numpy broadcasting;
// float32, float16 and bfloat16 (computed in float32, rounded once).
#include <fmt/format.h>

#include <limits>
#include <string>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"
#include "ops/point_chain_nodes.hpp"

namespace kiln::backends::gpu {
namespace {

using kernels::BinaryOp;

// The op and its parameters are read from the node (ops::point_step_of); the table names the
// kernels.
struct UnaryEntry {
  const char* op_type;
  const char* kernel;
  const char* domain = "";
};

constexpr UnaryEntry kUnary[] = {
    {"Relu", "gpu.relu"},
    {"Neg", "gpu.neg"},
    {"Abs", "gpu.abs"},
    {"Exp", "gpu.exp"},
    {"Log", "gpu.log"},
    {"Sqrt", "gpu.sqrt"},
    {"Reciprocal", "gpu.reciprocal"},
    {"Tanh", "gpu.tanh"},
    {"Sigmoid", "gpu.sigmoid"},
    {"Erf", "gpu.erf"},
    {"Sign", "gpu.sign"},
    {"Softplus", "gpu.softplus"},
    {"Softsign", "gpu.softsign"},
    {"Elu", "gpu.elu"},
    {"Selu", "gpu.selu"},
    {"Celu", "gpu.celu"},
    {"LeakyRelu", "gpu.leaky_relu"},
    {"HardSigmoid", "gpu.hard_sigmoid"},
    {"HardSwish", "gpu.hard_swish"},
    {"Mish", "gpu.mish"},
    {"ThresholdedRelu", "gpu.thresholded_relu"},
    {"Clip", "gpu.clip"},
    {"Gelu", "gpu.gelu"},
    {"Gelu", "gpu.gelu", "ai.kiln"},
};

struct BinaryEntry {
  const char* op_type;
  const char* kernel;
  BinaryOp op;
};

constexpr BinaryEntry kBinary[] = {
    {"Add", "gpu.add", BinaryOp::Add}, {"Sub", "gpu.sub", BinaryOp::Sub},
    {"Mul", "gpu.mul", BinaryOp::Mul}, {"Div", "gpu.div", BinaryOp::Div},
    {"Pow", "gpu.pow", BinaryOp::Pow}, {"Max", "gpu.max", BinaryOp::Max},
    {"Min", "gpu.min", BinaryOp::Min},
};

// "" when the output is declared with input 0's element type (or not declared).
std::string check_output_type(const ir::Node& node) {
  const TypeInfo* x = tensor_type(node.input(0));
  const TypeInfo* y = tensor_type(node.output(0));
  if (node.outputs().size() != 1 || !node.output(0)) return "expected one output";
  if (y && y->dtype != DataType::Undefined && y->dtype != x->dtype)
    return fmt::format("{} output {} differs from its input {}", node.op_type(), y->to_string(),
                       x->to_string());
  return "";
}

// The op's parameters from the node (ops/point_chain_nodes: the reading the point chains
// share); "" or why they cannot be had.
std::string unary_params(const ir::Node& node, kernels::UnaryParams& p) {
  point::PointStep step;
  try {
    if (std::string why = ops::point_step_of(node, step); !why.empty()) return why;
  } catch (const Error& err) {
    return err.message();
  }
  p.op = step.op;
  p.alpha = step.alpha;
  p.beta = step.beta;
  return "";
}

std::string check_unary(const ir::Node& node) {
  if (std::string why = check_float_input(node, 0); !why.empty()) return why;
  if (std::string why = check_output_type(node); !why.empty()) return why;
  kernels::UnaryParams p;
  return unary_params(node, p);  // also the input count (Clip takes three)
}

class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const UnaryEntry& e, const ir::Node& node)
      : name_(e.kernel), dtype_(node.input(0)->type().dtype) {
    unary_params(node, params_);
  }
  std::string_view name() const override { return name_; }
  // Element by element: any layout, the output in the input's.
  BlockedLayouts blocked_layouts() const override { return {.uniform = true}; }

  void run(std::span<const DeviceTensor> inputs, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = inputs[0];
    KILN_CHECK(x.dtype == dtype_, ErrorCode::Internal,
               "{}: input is {}, the kernel was made for {}", name_, dtype_name(x.dtype),
               dtype_name(dtype_));
    DeviceTensor y = outputs.allocate(0, dtype_, x.dims);
    KILN_CHECK(y.layout == x.layout, ErrorCode::Internal, "{}: input {} but output {}", name_,
               x.layout.to_string(), y.layout.to_string());
    // Over the storage: padding of a blocked layout is computed too, harmlessly.
    check_launch(kernels::launch_unary(params_, *float_type(dtype_), x.data, y.data,
                                       x.storage_numel(), gpu_stream(stream).handle()),
                 name_);
  }

 private:
  const char* name_;
  DataType dtype_;
  kernels::UnaryParams params_;
};

std::string check_binary(const ir::Node& node) {
  if (node.inputs().size() != 2)
    return fmt::format("{} with {} inputs (the GPU takes two)", node.op_type(),
                       node.inputs().size());
  for (size_t slot = 0; slot < 2; ++slot) {
    if (std::string why = check_float_input(node, slot); !why.empty()) return why;
  }
  const TypeInfo& a = node.input(0)->type();
  const TypeInfo& b = node.input(1)->type();
  if (a.dtype != b.dtype)
    return fmt::format("{} of {} and {}: mixed element types are not supported on the GPU",
                       node.op_type(), a.to_string(), b.to_string());
  if (std::string why = check_output_type(node); !why.empty()) return why;
  const auto da = static_dims(node.input(0));
  const auto db = static_dims(node.input(1));
  if (da && db) {
    std::vector<int64_t> out;
    if (!broadcast_dims({*da, *db}, out))
      return fmt::format("{}: {} and {} do not broadcast", node.op_type(), a.to_string(),
                         b.to_string());
    if (out.size() > static_cast<size_t>(kernels::kMaxDims))
      return fmt::format("{} of rank {} (the GPU broadcasts up to rank {})", node.op_type(),
                         out.size(), kernels::kMaxDims);
  }
  return "";
}

class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const BinaryEntry& e, const ir::Node& node)
      : name_(e.kernel),
        op_(e.op),
        dtype_(node.input(0)->type().dtype),
        uniform_(same_declared_shapes(node)) {}
  std::string_view name() const override { return name_; }
  // Operands of one declared shape go element by element in any shared layout; a broadcast
  // walks row-major dims.
  BlockedLayouts blocked_layouts() const override {
    return uniform_ ? BlockedLayouts{.uniform = true} : BlockedLayouts{};
  }

  void run(std::span<const DeviceTensor> inputs, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& a = inputs[0];
    const DeviceTensor& b = inputs[1];
    KILN_CHECK(a.dtype == dtype_ && b.dtype == dtype_, ErrorCode::Internal,
               "{}: inputs are {} and {}, the kernel was made for {}", name_, dtype_name(a.dtype),
               dtype_name(b.dtype), dtype_name(dtype_));
    hipStream_t s = gpu_stream(stream).handle();
    const kernels::FloatType type = *float_type(dtype_);
    if (a.dims == b.dims) {
      DeviceTensor y = outputs.allocate(0, dtype_, a.dims);
      KILN_CHECK(a.layout == b.layout && y.layout == a.layout, ErrorCode::Internal,
                 "{}: layouts {}, {} -> {} differ", name_, a.layout.to_string(),
                 b.layout.to_string(), y.layout.to_string());
      check_launch(
          kernels::launch_binary(op_, type, a.data, b.data, y.data, a.storage_numel(), nullptr, s),
          name_);
      return;
    }
    std::vector<int64_t> dims;
    KILN_CHECK_ARG(broadcast_dims({a.dims, b.dims}, dims), "{}: {} and {} do not broadcast", name_,
                   dims_to_string(a.dims), dims_to_string(b.dims));
    DeviceTensor y = outputs.allocate(0, dtype_, dims);
    KILN_CHECK(a.layout.kind == Layout::Kind::RowMajor && b.layout.kind == Layout::Kind::RowMajor &&
                   y.layout.kind == Layout::Kind::RowMajor,
               ErrorCode::Internal, "{}: a broadcast needs row-major operands", name_);
    if (y.numel() == 0) return;
    const kernels::StridedShape shape = make_strided_shape(
        dims, {broadcast_strides(a.dims, dims), broadcast_strides(b.dims, dims)}, name_);
    check_launch(kernels::launch_binary(op_, type, a.data, b.data, y.data, y.numel(), &shape, s),
                 name_);
  }

 private:
  const char* name_;
  BinaryOp op_;
  DataType dtype_;
  bool uniform_;
};

// Unary kernels read each element before writing the output element of its index, so output
// 0 may take input 0's space. Binary ones may take either input's: the planner gives it only
// to an input of the output's shape, which a broadcast reads at the output's own index.
const bool kRegistered = [] {
  for (const UnaryEntry& e : kUnary) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.domain = e.domain;
    def.op_type = e.op_type;
    def.name = e.kernel;
    def.in_place_inputs = {0};
    def.check = check_unary;
    def.create = [e](const ir::Node& n) -> std::unique_ptr<Kernel> {
      return std::make_unique<UnaryKernel>(e, n);
    };
    KernelTable::instance().add(std::move(def));
  }
  for (const BinaryEntry& e : kBinary) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.op_type = e.op_type;
    def.name = e.kernel;
    def.in_place_inputs = {0, 1};
    def.check = check_binary;
    def.create = [e](const ir::Node& n) -> std::unique_ptr<Kernel> {
      return std::make_unique<BinaryKernel>(e, n);
    };
    KernelTable::instance().add(std::move(def));
  }
  return true;
}();

}  // namespace
}  // namespace kiln::backends::gpu
