#pragma once
// The input slots of ai.onnx QLinearConv / QLinearMatMul and of ai.kiln FusedQLinearConv /
// FusedQLinearMatMul (ops/qlinear_fused.cpp), which share them so that one CPU kernel runs
// both: the reference, the CPU's int8 kernels and the passes that write these nodes name them
// from here (`using enum ops::qlinear::Slot;`).
#include <cstddef>

namespace kiln::ops::qlinear {

enum Slot : size_t {
  kX,
  kXScale,
  kXZero,
  kW,
  kWScale,
  kWZero,
  kYScale,
  kYZero,
  kBias,
  // FusedQLinearConv's residual Z (passes/fuse_conv_residual): float32, or 8-bit with its scale
  // and zero point in the two slots after it.
  kResidual,
  kResidualScale,
  kResidualZero
};

}  // namespace kiln::ops::qlinear
