#pragma once
// The graph passes. Each is a small value type; its file holds the one job it does.
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::passes {

// Removes nodes whose outputs nothing reads (graph outputs and subgraph captures count as reads)
// and initializers nothing reads.
struct EliminateDeadCode {
  std::string_view name() const { return "eliminate_dead_code"; }
  bool apply(ir::Graph& graph) const;
};

// Removes nodes that pass their input through unchanged: Identity, Dropout in inference,
// Cast to the same type, Reshape / Expand to the same static shape, Transpose by the identity
// permutation.
struct EliminateIdentity {
  std::string_view name() const { return "eliminate_identity"; }
  bool apply(ir::Graph& graph) const;
};

// Evaluates nodes whose inputs are all constants with their reference kernels and replaces them
// by initializers; also resolves Shape and Size of statically-shaped values, and Gather / Slice
// of a Shape whose selected dims are static even when other dims are symbolic (so Shape ->
// Gather -> Unsqueeze -> Concat -> Reshape chains end in a constant shape). Skips random ops,
// nodes with subgraphs and results larger than `max_bytes`.
struct FoldConstants {
  size_t max_bytes = size_t{16} << 20;
  // Leaves DequantizeLinear nodes of int8 constant weights that a Conv, MatMul or Gemm reads
  // (for FuseQuantizedOps, which reads the int8 weight itself and folds the rest).
  bool keep_int8_weights = false;
  std::string_view name() const { return "fold_constants"; }
  bool apply(ir::Graph& graph) const;
};

// Merges nodes that compute the same op with the same attributes on the same inputs, and
// initializers holding identical data.
struct EliminateCommonSubexpressions {
  std::string_view name() const { return "eliminate_common_subexpressions"; }
  bool apply(ir::Graph& graph) const;
};

// Folds Pad(x, zeros on the spatial dims) into the Conv / ai.kiln FusedConv nodes that read it
// (every reader such a convolution with explicit pads): they read x with the Pad's amounts
// added to their pads.
struct FoldPadIntoConv {
  std::string_view name() const { return "fold_pad_into_conv"; }
  bool apply(ir::Graph& graph) const;
};

// Folds an inference-mode BatchNormalization into the Conv feeding it (constant weights, float32
// or float64, the Conv output read only by the BatchNormalization).
struct FuseConvBatchNorm {
  std::string_view name() const { return "fuse_conv_batchnorm"; }
  bool apply(ir::Graph& graph) const;
};

// Folds an inference-mode BatchNormalization into the Gemm feeding it (constant B and C, either
// transB, float32 or float64): B's columns are scaled and C becomes the folded bias.
struct FuseGemmBatchNorm {
  std::string_view name() const { return "fuse_gemm_batchnorm"; }
  bool apply(ir::Graph& graph) const;
};

// Fuses Conv / Gemm / MatMul with the bias added after them and the activation that follows
// (Relu, Clip, Sigmoid, SiLU / Swish, HardSwish, HardSigmoid, LeakyRelu, Tanh, Gelu): a constant
// per-channel Add joins Conv's B or Gemm's C; an activation makes the node an ai.kiln FusedConv /
// FusedGemm; MatMul -> Add(constant bias of the last dim) [-> activation] becomes FusedMatMul;
// com.microsoft MatMulNBits -> Add(constant bias) joins its bias input, an activation after it
// makes it FusedMatMulNBits. Only values read once and not graph outputs are fused away.
struct FuseBiasActivation {
  std::string_view name() const { return "fuse_bias_activation"; }
  bool apply(ir::Graph& graph) const;
};

// Static INT8 QDQ patterns into ai.kiln FusedQLinearConv / FusedQLinearMatMul, for the CPU's int8
// kernels: DequantizeLinear(uint8 / int8 activation, per tensor) -> Conv / MatMul / Gemm (or
// their fused forms) reading DequantizeLinear(int8 constant weight, zero point 0, per tensor or
// per output channel) with a constant float32 bias [-> QuantizeLinear per tensor]; Gemm's alpha
// and beta * C folded in, transB undone on the weight. Anything else is left to the reference
// path. Then folds the weights' DequantizeLinear nodes it did not take (kept by
// FoldConstants::keep_int8_weights). In add_default_passes for the CPU, after the bias and
// activation fusion.
struct FuseQuantizedOps {
  std::string_view name() const { return "fuse_quantized_ops"; }
  bool apply(ir::Graph& graph) const;
};

// Conv (or a FusedConv without an activation) -> Add(its result, a same-shape residual)
// [-> Relu] becomes FusedConv(X, W, B, Z) computing act(conv(X) + B + Z). A device pass
// (add_device_passes): the GPU's cuDNN convolution takes the residual, the CPU's does not.
struct FuseConvResidual {
  std::string_view name() const { return "fuse_conv_residual"; }
  bool apply(ir::Graph& graph) const;
};

// A 1x1 Conv / FusedConv (stride 1, no padding, group 1, float32) whose result only a depthwise
// 3x3 one reads (stride 1 or 2, pads 1) becomes ai.kiln FusedConvDepthwise; activations None,
// Relu or Clip. A CPU device pass (add_device_passes): oneDNN's dw post-op computes the pair.
struct FuseConvDepthwise {
  std::string_view name() const { return "fuse_conv_depthwise"; }
  bool apply(ir::Graph& graph) const;
};

// FusedConv ending in Clip(0, max) whose result only depthwise FusedConvs read: Relu there, and
// input_max = max on the readers (the depthwise kernel clips as it loads). A device pass
// (add_device_passes): the GPU's depthwise kernel takes input_max, the CPU's oneDNN does not.
struct FoldClipIntoDepthwise {
  std::string_view name() const { return "fold_clip_into_depthwise"; }
  bool apply(ir::Graph& graph) const;
};

// Element-wise ops in a row, each result read only by the next and all of one shape (their other
// operands broadcast into it), become one ai.kiln PointChain (at most 8 ops, 3 operands). A device
// pass (add_device_passes): the GPU runs the chain as one kernel.
struct FusePointChains {
  std::string_view name() const { return "fuse_point_chains"; }
  bool apply(ir::Graph& graph) const;
};

// MatMuls / FusedMatMuls reading the same input with constant 2-D weights of the same row count
// (and the same attributes, biases alike) become one over the weights side by side, then a Split
// of its last axis: Q, K and V projections as one GEMM. A device pass (add_device_passes).
struct MergeParallelMatMuls {
  std::string_view name() const { return "merge_parallel_matmuls"; }
  bool apply(ir::Graph& graph) const;
};

// Replaces LayerNormalization written out as ReduceMean, Sub, Pow 2 (or Mul), ReduceMean, Add
// epsilon, Sqrt, Div [, Mul gamma] [, Add beta] (torch.onnx below opset 17) by one node: ai.onnx
// LayerNormalization when the graph imports opset 17 or later, else ai.kiln's.
struct FuseLayerNorm {
  std::string_view name() const { return "fuse_layer_norm"; }
  bool apply(ir::Graph& graph) const;
};

// Replaces Gelu written out, 0.5 * x * (1 + erf(x / sqrt 2)) or
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), products in any order, by one node:
// ai.onnx Gelu when the graph imports opset 20 or later, else ai.kiln's.
struct FuseGelu {
  std::string_view name() const { return "fuse_gelu"; }
  bool apply(ir::Graph& graph) const;
};

// Add(x, skip) [with x = Add(h, constant bias)] -> LayerNormalization over the last dim becomes
// ai.kiln SkipLayerNormalization (which also yields the sum when something else reads it).
struct FuseSkipLayerNorm {
  std::string_view name() const { return "fuse_skip_layer_norm"; }
  bool apply(ir::Graph& graph) const;
};

// MatMul(Q, K^T) -> scale -> [Add mask] -> Softmax -> MatMul(V) becomes ai.kiln
// ScaledDotProductAttention(Q, K, V, mask) with the scale as an attribute. torch's exported
// Where(IsNaN(P), 0, P) after the Softmax is taken too (zero_nan_probs) as `nan_guard` says.
struct FuseAttention {
  enum class NanGuard {
    All,      // every NaN-guarded attention (the CPU)
    Float16,  // float16 ones only (the GPU: its matrix-tile kernel computes them; in float32
              // its FMA kernel lost to the library GEMMs and small kernels between)
    None,
  };
  NanGuard nan_guard = NanGuard::All;
  std::string_view name() const { return "fuse_attention"; }
  bool apply(ir::Graph& graph) const;
};

// ScaledDotProductAttention between Transposes that swap the sequence and heads axes of Q, K, V
// and of its output becomes the op with bsnh = 1 (no Transposes). A device pass (GPU and CPU).
struct FoldAttentionTransposes {
  std::string_view name() const { return "fold_attention_transposes"; }
  bool apply(ir::Graph& graph) const;
};

// Composes Transpose pairs (removing them when they cancel) and moves a Transpose down through
// element-wise ops when another Transpose follows, so the two meet and compose.
struct CancelTransposes {
  std::string_view name() const { return "cancel_transposes"; }
  bool apply(ir::Graph& graph) const;
};

// Reshape of a Reshape / Flatten / Squeeze / Unsqueeze reads the original tensor directly;
// Squeeze(Unsqueeze(x)) and Unsqueeze(Squeeze(x)) over the same axes become x.
struct CollapseReshapes {
  std::string_view name() const { return "collapse_reshapes"; }
  bool apply(ir::Graph& graph) const;
};

// What ConvertToFloat16 did, for the compile summary and tests.
struct Fp16Summary {
  size_t float_nodes = 0;             // nodes with a float32 output before the pass
  size_t converted_nodes = 0;         // of them, now computing in float16
  size_t casts = 0;                   // Cast nodes inserted at precision boundaries
  size_t weight_bytes_converted = 0;  // float32 bytes of initializers stored as float16 now
  std::vector<std::string> clamped;   // initializers with values beyond +-65504 (clamped)
  size_t kept_for_range = 0;          // convertible nodes left float32 for keep_values
};

// Converts float32 compute to float16 (not in the default pipeline: `kiln compile --fp16` runs
// it after the fusions). Nodes of an allowlist of ops whose ONNX type constraints take float16
// in those slots (convolutions, matrix products, pooling, normalizations, activations,
// element-wise arithmetic, data movement; fp16_convertible) read and write float16; float32
// initializers they read are stored as float16 (values beyond +-65504 clamped, with a warning
// naming the tensor); a Cast is inserted wherever a float32 value meets a float16 reader or the
// other way round. Graph inputs and outputs keep float32 unless keep_io_types is false. Nodes
// holding subgraphs, values captured by subgraphs, and subgraph bodies stay float32.
// half_type BFloat16 converts to bfloat16 the same way (`kiln compile --bf16`): float32's range,
// so nothing is clamped.
struct ConvertToFloat16 {
  DataType half_type = DataType::Float16;
  bool keep_io_types = true;
  std::set<std::string> keep_ops;  // op types to leave float32 even though allowlisted
  // Values (by name) whose float32 magnitudes leave float16's range: a node reading or writing
  // one stays float32 (compiler/fp16_range.hpp measures them).
  std::set<std::string> keep_values;
  Fp16Summary* summary = nullptr;  // filled in when set
  std::string_view name() const { return "convert_to_fp16"; }
  bool apply(ir::Graph& graph) const;
};

// True for ops in ConvertToFloat16's allowlist for `half_type`.
bool fp16_convertible(const ir::Node& node, DataType half_type = DataType::Float16);

// Re-runs shape inference over the graph's nodes in order, so dims fixed or bounded on the inputs
// reach every value (kiln compile --shape / --shape-range).
struct InferShapes {
  std::string_view name() const { return "infer_shapes"; }
  bool apply(ir::Graph& graph) const;
};

// Fixes or bounds the dims of graph input `name` (static dims, or symbols with a min/max);
// InvalidArgument when the rank or a fixed dim disagrees with the model.
void set_input_shape(ir::Graph& graph, const std::string& name, const Shape& shape);

// True for ops whose outputs are not a function of their inputs (random generators); passes
// must neither fold nor merge them.
bool is_nondeterministic(const ir::Node& node);

}  // namespace kiln::passes
