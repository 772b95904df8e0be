#pragma once
// ONNX LSTM on the GPU (lstm.hip): per direction, one product of every time step's input with
// W (the GEMM, gemm.hpp), then per step the product of the hidden state with R and one kernel
// for the gates, the cell and the outputs. Plain declarations: the runtime side (g++ on NVIDIA)
// includes this.
#include <cstddef>
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// ONNX's recurrent activations (alpha and beta as the spec's defaults or the node's lists).
enum class RnnActivation {
  Sigmoid,
  Tanh,
  Relu,
  Affine,
  LeakyRelu,
  ThresholdedRelu,
  ScaledTanh,
  HardSigmoid,
  Elu,
  Softsign,
  Softplus
};
struct RnnAct {
  RnnActivation kind = RnnActivation::Sigmoid;
  float alpha = 0.f, beta = 0.f;
};

// Operands as the ONNX node has them (layout 0: X [seq, batch, input], Y [seq, dirs, batch,
// hidden], states [dirs, batch, hidden]; layout 1 (batch_major): X [batch, seq, input], Y
// [batch, seq, dirs, hidden], states [batch, dirs, hidden]); gates in ONNX's order i, o, f, c.
// Optional operands are null when absent. Scratch (lstm_scratch_bytes): the input products of
// one direction, the recurrent product of one step, the hidden state in the element type and
// the cell state in float32.
struct LstmArgs {
  FloatType type = FloatType::F32;  // F32 or F16
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int dirs = 1;
  bool reverse = false;  // direction "reverse" (bidirectional: the second direction is)
  bool batch_major = false;
  const void* x = nullptr;
  const void* w = nullptr;        // [dirs, 4 hidden, input]
  const void* r = nullptr;        // [dirs, 4 hidden, hidden]
  const void* b = nullptr;        // [dirs, 8 hidden]: W's biases, then R's
  const int32_t* lens = nullptr;  // [batch]; one outside [0, seq] is taken as 0
  const void* h0 = nullptr;
  const void* c0 = nullptr;
  const void* p = nullptr;  // peepholes [dirs, 3 hidden]: i, o, f
  void* y = nullptr;
  void* y_h = nullptr;
  void* y_c = nullptr;
  RnnAct act[2][3];  // per direction: f (gates), g (cell input), h (cell output)
  bool has_clip = false;
  float clip = 0.f;
  bool input_forget = false;
  // The GEMM's choices for the device (GemmArgs' fields of the same names).
  bool matrix_tiles = true, wgmma = false;
  int multiprocessors = 1;
  void* scratch = nullptr;
};

size_t lstm_scratch_bytes(const LstmArgs& args);

hipError_t launch_lstm(const LstmArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
