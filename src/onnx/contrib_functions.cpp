#include "onnx/contrib_functions.hpp"

#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace kiln::onnx_io {
namespace {

bool present(const onnx::NodeProto& call, int i) {
  return i < call.input_size() && !call.input(i).empty();
}

const onnx::AttributeProto* attribute(const onnx::NodeProto& call, const std::string& name) {
  for (const auto& a : call.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::string label(const onnx::NodeProto& call) {
  return call.name().empty() ? call.op_type() : call.op_type() + " '" + call.name() + "'";
}

int64_t int_attribute(const onnx::NodeProto& call, const std::string& name, int64_t fallback) {
  const onnx::AttributeProto* a = attribute(call, name);
  KILN_CHECK_ARG(!a || a->type() == onnx::AttributeProto::INT,
                 "node {}: attribute '{}' must be an int", label(call), name);
  return a ? a->i() : fallback;
}

float float_attribute(const onnx::NodeProto& call, const std::string& name, float fallback) {
  const onnx::AttributeProto* a = attribute(call, name);
  KILN_CHECK_ARG(!a || a->type() == onnx::AttributeProto::FLOAT,
                 "node {}: attribute '{}' must be a float", label(call), name);
  return a ? a->f() : fallback;
}

// A body under construction: formal inputs named in slot order, nodes added in order.
class Body {
 public:
  Body(const onnx::NodeProto& call, std::vector<std::string> inputs) {
    f_.set_name(call.op_type());
    f_.set_domain(call.domain());
    auto* opset = f_.add_opset_import();
    opset->set_domain("");
    opset->set_version(13);  // per-axis DequantizeLinear (QGemm's weight)
    for (const std::string& i : inputs) f_.add_input(i);
    f_.add_output("Y");
  }
  onnx::NodeProto& node(const std::string& op, std::vector<std::string> inputs,
                        const std::string& output) {
    onnx::NodeProto* n = f_.add_node();
    n->set_op_type(op);
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    return *n;
  }
  // DequantizeLinear(x, x + "_scale", x + "_zero_point") -> x + "_float".
  std::string dequantize(const std::string& x) {
    node("DequantizeLinear", {x, x + "_scale", x + "_zero_point"}, x + "_float");
    return x + "_float";
  }
  onnx::FunctionProto take() { return std::move(f_); }

 private:
  onnx::FunctionProto f_;
};

void set_axis(onnx::NodeProto& n, int64_t axis) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
}

void copy_attributes(const onnx::NodeProto& call, onnx::NodeProto& to,
                     const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (const onnx::AttributeProto* a = attribute(call, name)) *to.add_attribute() = *a;
  }
}

// The inputs in `slots` (the data and their scales) must be present.
void require_inputs(const onnx::NodeProto& call, std::initializer_list<int> slots) {
  for (int slot : slots) {
    KILN_CHECK_ARG(present(call, slot), "node {}: input {} is required, absent", label(call), slot);
  }
}

void require_output_zero_point(const onnx::NodeProto& call, int slot) {
  KILN_CHECK_ARG(present(call, slot),
                 "node {}: its output zero point (input {}) is absent; Kiln takes this op with "
                 "it (it gives the output's type)",
                 label(call), slot);
}

void refuse_channels_last(const onnx::NodeProto& call) {
  KILN_CHECK(int_attribute(call, "channels_last", 0) == 0, ErrorCode::Unsupported,
             "node {}: channels_last=1 is not supported", label(call));
}

// A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point -> C.
onnx::FunctionProto binary(const onnx::NodeProto& call, const std::string& op) {
  require_inputs(call, {0, 1, 3, 4, 6});
  require_output_zero_point(call, 7);
  Body b(call, {"A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "Y_scale",
                "Y_zero_point"});
  const std::string a = b.dequantize("A"), bf = b.dequantize("B");
  b.node(op, {a, bf}, "Y_float");
  b.node("QuantizeLinear", {"Y_float", "Y_scale", "Y_zero_point"}, "Y");
  return b.take();
}

// X, X_scale, X_zero_point, Y_scale, Y_zero_point -> Y, with `op`'s attributes from the call.
onnx::FunctionProto unary(const onnx::NodeProto& call, const std::string& op,
                          const std::vector<std::string>& attributes) {
  require_inputs(call, {0, 1, 3});
  require_output_zero_point(call, 4);
  Body b(call, {"X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"});
  const std::string x = b.dequantize("X");
  copy_attributes(call, b.node(op, {x}, "Y_float"), attributes);
  b.node("QuantizeLinear", {"Y_float", "Y_scale", "Y_zero_point"}, "Y");
  return b.take();
}

// Y_scale, Y_zero_point, then X, X_scale, X_zero_point for each input -> Y.
onnx::FunctionProto concat(const onnx::NodeProto& call) {
  require_inputs(call, {0});
  require_output_zero_point(call, 1);
  KILN_CHECK_ARG(call.input_size() >= 5 && (call.input_size() - 2) % 3 == 0,
                 "node {}: takes Y_scale, Y_zero_point and triples (X, X_scale, X_zero_point), "
                 "got {} inputs",
                 label(call), call.input_size());
  std::vector<std::string> formals = {"Y_scale", "Y_zero_point"}, parts;
  for (int i = 0; i < (call.input_size() - 2) / 3; ++i) {
    require_inputs(call, {2 + 3 * i, 3 + 3 * i});
    const std::string x = "X" + std::to_string(i);
    formals.insert(formals.end(), {x, x + "_scale", x + "_zero_point"});
  }
  Body b(call, formals);
  for (int i = 0; i < (call.input_size() - 2) / 3; ++i) {
    parts.push_back(b.dequantize("X" + std::to_string(i)));
  }
  copy_attributes(call, b.node("Concat", parts, "Y_float"), {"axis"});
  b.node("QuantizeLinear", {"Y_float", "Y_scale", "Y_zero_point"}, "Y");
  return b.take();
}

// A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?, y_scale?, y_zero_point? -> Y: C is
// int32 in the product's units (a_scale * b_scale); without y_scale the result is float32.
onnx::FunctionProto qgemm(const onnx::NodeProto& call) {
  require_inputs(call, {0, 1, 3, 4});
  const bool bias = present(call, 6), quantized = present(call, 7);
  const float alpha = float_attribute(call, "alpha", 1.f);
  KILN_CHECK(!bias || alpha == 1.f, ErrorCode::Unsupported,
             "node {}: alpha {} beside a bias C is not supported", label(call), alpha);
  if (quantized) require_output_zero_point(call, 8);
  Body b(call, {"A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C", "Y_scale",
                "Y_zero_point"});
  const std::string a = b.dequantize("A");
  // b_scale per output column: B's axis 1, or 0 when transposed.
  set_axis(b.node("DequantizeLinear", {"B", "B_scale", "B_zero_point"}, "B_float"),
           int_attribute(call, "transB", 0) != 0 ? 0 : 1);
  std::vector<std::string> gemm_inputs = {a, "B_float"};
  if (bias) {
    b.node("Mul", {"A_scale", "B_scale"}, "C_scale");
    // C is [N]: its scale (one, or one a column) along axis 0.
    set_axis(b.node("DequantizeLinear", {"C", "C_scale"}, "C_float"), 0);
    gemm_inputs.push_back("C_float");
  }
  copy_attributes(call, b.node("Gemm", gemm_inputs, quantized ? "Y_float" : "Y"),
                  {"alpha", "transA", "transB"});
  if (quantized) b.node("QuantizeLinear", {"Y_float", "Y_scale", "Y_zero_point"}, "Y");
  return b.take();
}

}  // namespace

std::optional<onnx::FunctionProto> contrib_function(const onnx::NodeProto& call) {
  if (call.domain() != "com.microsoft") return std::nullopt;
  const std::string& op = call.op_type();
  if (op == "QLinearAdd") return binary(call, "Add");
  if (op == "QLinearMul") return binary(call, "Mul");
  if (op == "QLinearSigmoid") return unary(call, "Sigmoid", {});
  if (op == "QLinearLeakyRelu") return unary(call, "LeakyRelu", {"alpha"});
  if (op == "QLinearGlobalAveragePool") {
    refuse_channels_last(call);
    return unary(call, "GlobalAveragePool", {});
  }
  if (op == "QLinearAveragePool") {
    refuse_channels_last(call);
    return unary(call, "AveragePool",
                 {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
  }
  if (op == "QLinearConcat") return concat(call);
  if (op == "QGemm") return qgemm(call);
  return std::nullopt;
}

}  // namespace kiln::onnx_io
