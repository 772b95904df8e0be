#pragma once
// MatMul and Gemm (and Kiln's FusedMatMul / FusedGemm with a Relu or none) on the GPU through
// cuBLASLt (NVIDIA; hipBLASLt would serve AMD where ROCm has
// it, and ROCm 5.2 has none): float32 (computed in float32, no TF32) and float16 (accumulated in
// float32), 2-D and batched products, Gemm's transA/transB/alpha, and its C as a bias row (beta 1,
// cuBLASLt's bias epilogue) or a full [M, N] matrix with any beta; a fused Relu is the epilogue.
// Which nodes it takes is decided from the declared types and shapes; the rest fall back to the CPU
// with the reason.
#include <memory>
#include <string_view>

#include "backends/backend.hpp"

namespace kiln::backends::gpu {

class GpuBackendImpl;

inline constexpr const char* kGemmKernel = "gpu.gemm";

Support gemm_support(const ir::Node& node);
// Builds the kernel (its cuBLASLt workspace is allocated here, on `backend`'s device); nullptr
// when `kernel_name` is not gpu.gemm.
std::unique_ptr<Kernel> create_gemm_kernel(GpuBackendImpl& backend, const ir::Node& node,
                                           std::string_view kernel_name);

}  // namespace kiln::backends::gpu
