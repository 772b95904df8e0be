#pragma once
// A 1x1, stride-1, unpadded, ungrouped convolution over channels-last tensors is one matrix
// product: Y[N*H*W, K] = X[N*H*W, C] * W[K, C]^T, with the bias, a residual Z (as GEMM's C,
// beta 1) and a Relu in cuBLASLt's epilogue. At batch 1 cuBLASLt's split-K kernels keep the
// device busy where cuDNN's legacy algorithms cannot (few output pixels, long reductions); the
// convolution kernel times both at its first run and keeps the faster (a tactic).
#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <cstddef>
#include <cstdint>

#include "backends/gpu/runtime/cublaslt_api.hpp"
#include "backends/gpu/vendor.hpp"
#include "core/dtype.hpp"

namespace kiln::backends::gpu {

class ConvGemm {
 public:
  ConvGemm() = default;
  ~ConvGemm();
  ConvGemm(const ConvGemm&) = delete;
  ConvGemm& operator=(const ConvGemm&) = delete;

  // Plans Y[m, k] = relu?(X[m, c] W[k, c]^T + bias[k] + Z[m, k]); false when cuBLASLt has no
  // algorithm within `workspace_bytes`.
  bool prepare(DataType dtype, int64_t m, int64_t k, int64_t c, bool bias, bool relu, bool residual,
               size_t workspace_bytes);
  // Queues the product; z may be null only when planned without a residual.
  void run(const void* x, const void* w, const void* bias, const void* z, void* y, void* workspace,
           hipStream_t stream) const;

 private:
  void reset();
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
  bool residual_ = false;
};

}  // namespace kiln::backends::gpu
#endif
