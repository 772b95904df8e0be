#pragma once
// Dynamic INT8 for LSTM (`kiln quantize --dynamic`): an ONNX LSTM whose W and R are constant
// float32 becomes a com.microsoft DynamicQuantizeLSTM (onnxruntime's contrib op, the form its
// `quantize_dynamic` writes, so that onnxruntime runs the file as Kiln does; kernel:
// ops/dynamic_quantize_lstm.cpp): W and R as int8, symmetric (zero point 0, range +-127), one
// scale per gate row and direction (or one per direction), stored transposed to [dirs, K, 4
// hidden]; X and each step's hidden state are quantized at run time by the kernel.
#include <string>

#include "ir/graph.hpp"

namespace kiln::compiler {

// Why `lstm` cannot become a DynamicQuantizeLSTM ("" when it can): layout 1, activations other
// than the defaults, sequence_lens, W or R not constant float32 [dirs, 4 hidden, K].
std::string dynamic_lstm_refusal(const ir::Node& lstm);

struct LstmRewrite {
  size_t float_bytes = 0;  // W and R as they were
  size_t int8_bytes = 0;   // their int8 codes
};

// Replaces `lstm` (dynamic_lstm_refusal empty) by the DynamicQuantizeLSTM; its outputs keep their
// names. The float W and R are left for the caller to remove once nothing reads them.
LstmRewrite rewrite_dynamic_lstm(ir::Graph& g, ir::Node* lstm, bool per_channel);

}  // namespace kiln::compiler
