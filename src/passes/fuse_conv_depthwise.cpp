// A 1x1 convolution whose result only a depthwise 3x3 convolution reads (MobileNetV2's
// expansion and depthwise layers) becomes one ai.kiln FusedConvDepthwise, which the CPU computes
// as one oneDNN convolution with its dw post-op: the expanded tensor (4.8 MB for MobileNetV2's
// features.2) is consumed in cache rows as it is made instead of going to memory and back, which
// made those depthwise layers 2-3x slower in the model than alone
// (bench/results/2026-12-07b-cpu-depthwise-in-model.md).
//
// A CPU device pass (add_device_passes): the GPU runs the two convolutions its own way.
// Only what oneDNN's dw post-op expresses: float32, 1x1 stride 1 without padding and group 1,
// then 3x3 depthwise, stride 1 or 2, pads 1, both with biases, activations None / Relu / Clip.
#include <vector>

#include "ops/fused_activation.hpp"
#include "ops/fused_conv_depthwise.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

bool is_conv(const ir::Node* n) {
  return n && (is_op(n, "Conv") || is_kiln_op(n, "FusedConv")) && n->outputs().size() == 1;
}

// The node's activation when oneDNN's dw fusion takes it (None, Relu, Clip).
std::optional<ops::FusedActivation> simple_activation(const ir::Node& n) {
  if (n.domain().empty()) return ops::FusedActivation{};
  try {
    ops::FusedActivation act = ops::FusedActivation::from_node(ops::AttrReader(n));
    if (act.kind == ops::Activation::None || act.kind == ops::Activation::Relu ||
        act.kind == ops::Activation::Clip) {
      return act;
    }
  } catch (const Error&) {
  }
  return std::nullopt;
}

bool all_equal(const std::optional<std::vector<int64_t>>& v, size_t n, int64_t value) {
  if (!v) return true;  // the default
  if (v->size() != n) return false;
  for (int64_t x : *v) {
    if (x != value) return false;
  }
  return true;
}

// X, constant W and B, float32 4-D, no residual, no input_max, explicit pads.
bool plain_inputs(const ir::Node& n) {
  if (n.inputs().size() != 3 || !n.input(0) || !n.input(1) || !n.input(2) ||
      !n.input(1)->is_constant() || !n.input(2)->is_constant() || n.attribute("input_max")) {
    return false;
  }
  const ir::Value* x = n.input(0);
  if (x->type().dtype != DataType::Float32 || n.output(0)->type().dtype != DataType::Float32 ||
      !x->type().shape || x->type().shape->rank() != 4) {
    return false;
  }
  const std::string pad_mode = string_attr(n, "auto_pad", "NOTSET");
  return pad_mode == "NOTSET" && all_equal(ints_attr(n, "dilations"), 2, 1);
}

bool pointwise(const ir::Node& n) {
  if (!is_conv(&n) || !plain_inputs(n) || int_attr(n, "group", 1) != 1) return false;
  const std::vector<int64_t>& w = n.input(1)->constant().dims();
  return w.size() == 4 && w[2] == 1 && w[3] == 1 && all_equal(ints_attr(n, "strides"), 2, 1) &&
         all_equal(ints_attr(n, "pads"), 4, 0);
}

// Depthwise 3x3 over `channels`, stride 1 or 2 (both dims alike), pads 1: its stride, else 0.
int64_t depthwise_stride(const ir::Node& n, int64_t channels) {
  if (!is_conv(&n) || !plain_inputs(n) || int_attr(n, "group", 1) != channels) return 0;
  const std::vector<int64_t>& w = n.input(1)->constant().dims();
  if (w != std::vector<int64_t>{channels, 1, 3, 3} || !all_equal(ints_attr(n, "pads"), 4, 1)) {
    return 0;
  }
  const std::vector<int64_t> s = ints_attr(n, "strides").value_or(std::vector<int64_t>{1, 1});
  if (s.size() != 2 || s[0] != s[1] || (s[0] != 1 && s[0] != 2)) return 0;
  return s[0];
}

bool fuse(Rewriter& rw, ir::Node& conv) {
  if (!pointwise(conv)) return false;
  const std::optional<ops::FusedActivation> act = simple_activation(conv);
  ir::Value* mid = conv.output(0);
  if (!act || !rw.single_use(mid)) return false;
  ir::Node* dw = rw.readers(mid)[0];
  const int64_t channels = conv.input(1)->constant().dims()[0];
  if (!is_conv(dw) || dw->input(0) != mid || dw->input(1) == mid || dw->input(2) == mid) {
    return false;
  }
  const int64_t stride = depthwise_stride(*dw, channels);
  const std::optional<ops::FusedActivation> dw_act = simple_activation(*dw);
  if (stride == 0 || !dw_act) return false;

  ir::Value* result = dw->output(0);
  ir::Graph& g = rw.graph();
  const int opset = import_kiln_domain(g);
  ir::Value* out = rw.new_value(result->name() + "_fused", result->type());
  ir::Node* node = rw.insert_node(
      dw, "FusedConvDepthwise", ops::kKilnDomain,
      {conv.input(0), conv.input(1), conv.input(2), dw->input(1), dw->input(2)}, {out}, opset);
  node->set_attribute("kernel_shape", ir::Attribute(std::vector<int64_t>{1, 1}));
  act->set_on(*node);
  ops::set_depthwise_stage_activation(*node, *dw_act);
  node->set_attribute("dw_strides", ir::Attribute(std::vector<int64_t>{stride, stride}));
  rw.replace(result, out, {dw, &conv});
  return true;
}

}  // namespace

bool FuseConvDepthwise::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
