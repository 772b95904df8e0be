#pragma once
// onnxruntime's com.microsoft quantized ops that its quantizer writes in the QOperator format
// beside ONNX's QLinearConv / QLinearMatMul (QLinearAdd, QLinearMul, QLinearSigmoid,
// QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QGemm), as
// ONNX functions of DequantizeLinear -> the float op -> QuantizeLinear that the importer inlines
// like a model's own functions. The optimizer then sees the QDQ patterns it folds into the int8
// kernels (QGemm's product becomes an int8 matmul), and the reference runs the standard ops.
// onnxruntime computes these ops the same way up to rounding (within one quantization step).
#include <optional>

#include <onnx/onnx-ml.pb.h>

namespace kiln::onnx_io {

// The function body for `call` (its attributes read, optional inputs as present), nullopt when
// `call` is not one of these ops. A form Kiln does not take (channels_last pooling, QGemm's
// alpha beside a bias, an absent output zero point, which would leave the output type unknown)
// throws Unsupported / InvalidArgument naming the node.
std::optional<onnx::FunctionProto> contrib_function(const onnx::NodeProto& call);

}  // namespace kiln::onnx_io
