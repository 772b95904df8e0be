#pragma once
// The fused activation of a kernel's epilogue (GemmActivation: ops::Activation's names and
// parameters, in its order) as one function for the host and the device: every fused kernel
// (the own GEMM, the depthwise convolution) and their host-side checks compute it with the same
// point functions (ops/point_ops.hpp) the reference uses, so a formula is fixed in one place.
// Plain header: no device-only code, so tests on the host call it as it is.
#include "backends/gpu/kernels/gemm.hpp"
#include "ops/point_ops.hpp"

namespace kiln::backends::gpu::kernels {

// alpha, beta: Clip's min and max, LeakyRelu's alpha, HardSigmoid's alpha and beta.
KILN_HOST_DEVICE inline float apply_activation(GemmActivation a, float x, float alpha, float beta) {
  return point::fused_activation(a, x, alpha, beta);
}

}  // namespace kiln::backends::gpu::kernels
