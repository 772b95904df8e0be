#include "ops/wrapped_kernel.hpp"

#include "ops/elementwise_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {

std::vector<RtValue> run_wrapped_kernel(const KernelContext& ctx, const char* op_type, int opset,
                                        const std::vector<const RtValue*>& inputs) {
  const OpDef& def = OpRegistry::instance().get("", op_type, opset);
  std::vector<RtValue> outputs(ctx.node().outputs().size());
  KernelContext inner(ctx.node(), inputs, outputs, nullptr, opset);
  def.kernel(inner);
  return outputs;
}

void infer_wrapped(InferContext& ctx, const char* op_type, int opset) {
  const OpDef& def = OpRegistry::instance().get("", op_type, opset);
  if (!def.infer) return;
  InferContext inner(ctx.node(), opset);
  def.infer(inner);
  for (const auto& [slot, type] : inner.inferred()) ctx.set_output_type(slot, type);
}

Tensor apply_activation(const Tensor& x, const FusedActivation& act) {
  if (act.kind == Activation::None) return x;
  return map_float(x, FusedActivation::name(act.kind), [&](double v) { return act.apply(v); });
}

}  // namespace kiln::ops
