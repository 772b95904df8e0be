#pragma once
// The input slots of com.microsoft DynamicQuantizeLSTM (ops/dynamic_quantize_lstm.cpp), shared by
// the reference kernel and the CPU backend's (backends/cpu/dynamic_lstm_kernel.cpp).
#include <cstddef>

namespace kiln::ops::dynamic_lstm {

enum Slot : size_t {
  kX = 0,
  kW,
  kR,
  kB,
  kSeqLens,
  kInitH,
  kInitC,
  kP,
  kWScale,
  kWZero,
  kRScale,
  kRZero,
  kSlots
};

}  // namespace kiln::ops::dynamic_lstm
