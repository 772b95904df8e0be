#pragma once
// Kiln's fused ops (ai.kiln FusedConv, FusedGemm, FusedMatMul, LayerNormalization, Gelu, ...)
// compute exactly what the ops they replace compute: their reference kernels run the registered
// reference kernel of the wrapped ai.onnx op on the fused node's own attributes (a fused node
// carries every attribute of the op it wraps), then add their epilogue. One oracle per op.
#include <vector>

#include "ops/fused_activation.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::ops {

// Runs the ai.onnx `op_type` kernel registered for `opset` on ctx's node, as if the node were
// that op at that opset, with `inputs` in its input slots (nullptr: an absent optional input).
// Returns one value per output slot of ctx's node; slots the wrapped op does not produce stay
// empty.
std::vector<RtValue> run_wrapped_kernel(const KernelContext& ctx, const char* op_type, int opset,
                                        const std::vector<const RtValue*>& inputs);

// Shape inference of ai.onnx `op_type` at `opset` for ctx's node (same input slots).
void infer_wrapped(InferContext& ctx, const char* op_type, int opset);

// Applies `act` to every element of a float tensor (computed in double, rounded once).
Tensor apply_activation(const Tensor& x, const FusedActivation& act);

}  // namespace kiln::ops
