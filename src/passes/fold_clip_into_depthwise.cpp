// A convolution ending in Clip(0, max) (ReLU6: MobileNetV2's expansions) whose result only
// depthwise FusedConvs read keeps the Relu half, which every GPU convolution has in its epilogue
// (cuBLASLt's and cuDNN's included), and hands the upper bound to its readers as `input_max`:
// the depthwise kernel takes min(x, max) as it loads x. Clip(0, m)(y) = min(Relu(y), m), and a
// depthwise filter's padding reads 0 either way, so the results are the same. What it saves is
// the separate clipping pass over the convolution's result that the libraries would need (the
// largest of the tensors that network writes: MobileNetV2 b64's 16 -> 96 expansion at 112 x 112
// is 154 MB in float16).
//
// A device pass (add_device_passes): the GPU's depthwise kernel reads input_max; on the CPU,
// oneDNN's convolution would fuse the Clip into its own post-ops, and a FusedConv with input_max
// runs on the reference kernel there.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/fused_activation.hpp"
#include "ops/kernel_context.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// A depthwise FusedConv reading `x` as its input and nothing else: one filter per channel of a
// 4-D x whose channel count is known, and no input_max of its own.
bool depthwise_reader(const ir::Node* n, const ir::Value* x) {
  if (!is_kiln_op(n, "FusedConv") || n->inputs().size() < 2 || n->input(0) != x ||
      n->attribute("input_max")) {
    return false;
  }
  for (size_t i = 1; i < n->inputs().size(); ++i) {
    if (n->input(i) == x) return false;
  }
  const ir::Value* w = n->input(1);
  if (!w || !w->is_constant() || !x->type().shape || x->type().shape->rank() != 4) return false;
  const Dim& channels = x->type().shape->dims()[1];
  const std::vector<int64_t>& wd = w->constant().dims();
  return channels.is_static() && wd.size() == 4 && wd[1] == 1 && wd[0] == channels.value() &&
         int_attr(*n, "group", 1) == channels.value();
}

bool fold(Rewriter& rw, ir::Node& conv) {
  if (!is_kiln_op(&conv, "FusedConv") || conv.outputs().size() != 1) return false;
  ops::FusedActivation act;
  try {
    act = ops::FusedActivation::from_node(ops::AttrReader(conv));
  } catch (const Error&) {
    return false;  // an activation the kernels refuse anyway, with their reason
  }
  if (act.kind != ops::Activation::Clip || act.alpha != 0.f || !std::isfinite(act.beta) ||
      act.beta <= 0.f) {
    return false;
  }
  ir::Value* y = conv.output(0);
  if (!is_float_value(y)) return false;
  const std::vector<ir::Node*>& readers = rw.readers(y);
  if (!std::all_of(readers.begin(), readers.end(),
                   [&](const ir::Node* r) { return depthwise_reader(r, y); })) {
    return false;
  }
  // At least one reader, and no graph output (which keeps its Clip).
  if (!rw.used_only_by(y, {readers.begin(), readers.end()})) return false;
  conv.remove_attribute("activation_params");
  ops::FusedActivation relu;
  relu.kind = ops::Activation::Relu;
  relu.set_on(conv);
  rw.touch(conv);
  for (ir::Node* r : readers) {
    r->set_attribute("input_max", ir::Attribute(act.beta));
    rw.touch(*r);
  }
  return true;
}

}  // namespace

bool FoldClipIntoDepthwise::apply(ir::Graph& root) const {
  return rewrite_graph(root, fold);
}

}  // namespace kiln::passes
