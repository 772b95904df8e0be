// Conv (or FusedConv without an activation) -> Add(the result, a residual of its shape)
// [-> Relu] becomes one FusedConv(X, W, B, Z): y = act(conv(X) + B + Z). cuDNN's fused
// convolution computes exactly that in one kernel, and oneDNN's with its sum post-op (the
// residual blocks of ResNets end so): one of the device passes (add_device_passes) of both.
// On the CPU a static INT8 convolution with a float32 result (ai.kiln FusedQLinearConv) takes
// the residual the same way, in its slot 9. When the Add reads the residual through a per-tensor
// DequantizeLinear and the sum [-> Relu] is read only by a QuantizeLinear to the residual's
// 8-bit type (a residual block of what `kiln quantize` writes), the node takes the 8-bit
// residual with its scale and zero point (slots 10, 11) and writes the quantized result itself:
// no float32 tensor between the blocks, no QuantizeLinear.
#include <algorithm>
#include <cstring>

#include "ops/fused_activation.hpp"
#include "ops/qlinear_slots.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"
#include "passes/qdq_patterns.hpp"

namespace kiln::passes {
namespace {

bool without_activation(const ir::Node& n) {
  const ir::Attribute* a = n.attribute("activation");
  return !a || (std::holds_alternative<std::string>(a->storage()) &&
                std::get<std::string>(a->storage()) == "None");
}

// FusedQLinearConv (a static INT8 convolution, passes/fuse_quantized_ops) with a float32
// result (no y_scale), no activation and no residual yet: Z goes in its slot 9.
bool float_qlinear_conv(const ir::Node& n) {
  return n.domain() == ops::kKilnDomain && n.op_type() == "FusedQLinearConv" &&
         n.inputs().size() <= ops::qlinear::kResidual && without_activation(n) &&
         n.outputs().size() == 1 && n.output(0) && n.output(0)->type().dtype == DataType::Float32;
}

bool fuse(Rewriter& rw, ir::Node& conv) {
  const bool plain = is_op(&conv, "Conv");
  const bool fused = conv.domain() == ops::kKilnDomain && conv.op_type() == "FusedConv" &&
                     conv.inputs().size() <= 3 && without_activation(conv);
  const bool qlinear = float_qlinear_conv(conv);
  if ((!plain && !fused && !qlinear) || conv.outputs().size() != 1 || conv.inputs().size() < 2) {
    return false;
  }
  ir::Value* y = conv.output(0);
  if (!is_float_value(y) || !rw.single_use(y) || !y->type().shape) return false;
  ir::Node* add = rw.readers(y)[0];
  if (!is_op(add, "Add") || add->inputs().size() != 2 || add->outputs().size() != 1) {
    return false;
  }
  ir::Value* z = add->input(0) == y ? add->input(1) : add->input(0);
  // The residual must have the result's exact shape (no broadcast) and type.
  if (!z || z == y || z->is_constant() || !z->type().shape || z->type().dtype != y->type().dtype ||
      !(*z->type().shape == *y->type().shape) ||
      !(*add->output(0)->type().shape == *y->type().shape)) {
    return false;
  }
  // The pattern's result: the sum, or the Relu after it.
  ir::Value* result = add->output(0);
  std::vector<ir::Node*> dead = {add, &conv};
  std::string activation = "None";
  if (rw.single_use(result)) {
    ir::Node* relu = rw.readers(result)[0];
    if (is_op(relu, "Relu") && relu->outputs().size() == 1) {
      activation = "Relu";
      result = relu->output(0);
      dead.insert(dead.begin(), relu);
    }
  }
  // The new node's inputs. FusedQLinearConv: its slots as they were (absent ones empty), Z in 9.
  // FusedConv: X, W, B, Z, positional, so a missing bias becomes a zero one.
  std::vector<ir::Value*> inputs;
  if (qlinear) {
    inputs.assign(ops::qlinear::kResidual + 1, nullptr);
    std::copy(conv.inputs().begin(), conv.inputs().end(), inputs.begin());
    inputs[ops::qlinear::kResidual] = z;
    // The 8-bit form: Z = DequantizeLinear(z_q), the result quantized to z_q's type.
    const std::optional<TensorQuant> zq = per_tensor_input(rw.producer(z, "DequantizeLinear"));
    ir::Node* q = requantizing_reader(rw, result);
    if (zq && q && q->output(0)->type().dtype == zq->q->type().dtype && !rw.touched(q->output(0))) {
      inputs[ops::qlinear::kYScale] = q->input(1);
      inputs[ops::qlinear::kYZero] = q->inputs().size() > 2 ? q->input(2) : nullptr;
      inputs[ops::qlinear::kResidual] = zq->q;
      inputs.push_back(zq->scale);
      inputs.push_back(zq->zero);
      while (!inputs.back()) inputs.pop_back();
      result = q->output(0);
      dead.insert(dead.begin(), q);
    }
  } else {
    ir::Value* b = conv.inputs().size() > 2 ? conv.input(2) : nullptr;
    if (!b) {
      const ir::Value* w = conv.input(1);
      if (!w->type().shape || !(*w->type().shape)[0].is_static()) return false;
      Tensor zeros(y->type().dtype, {(*w->type().shape)[0].value()});
      std::memset(zeros.raw_data(), 0, zeros.nbytes());
      b = rw.new_constant(y->name() + "_zero_bias", std::move(zeros));
    }
    inputs = {conv.input(0), conv.input(1), b, z};
  }
  ir::Graph& g = rw.graph();
  const int opset = import_kiln_domain(g);
  ir::Value* out = rw.new_value(result->name() + "_fused", result->type());
  // At the last node of the pattern: the residual is computed by then.
  ir::Node* node = rw.insert_node(dead.front(), qlinear ? "FusedQLinearConv" : "FusedConv",
                                  ops::kKilnDomain, inputs, {out}, opset);
  for (const auto& [name, a] : conv.attributes()) {
    if (name != "activation" && name != "activation_params") node->set_attribute(name, a);
  }
  node->set_attribute("activation", ir::Attribute(activation));
  rw.replace(result, out, dead);
  return true;
}

}  // namespace

bool FuseConvResidual::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
