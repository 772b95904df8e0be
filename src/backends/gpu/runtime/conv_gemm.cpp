#include "backends/gpu/runtime/conv_gemm.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include "core/error.hpp"

namespace kiln::backends::gpu {

ConvGemm::~ConvGemm() {
  reset();
}

void ConvGemm::reset() {
  const CublasLtApi& lt = cublaslt();
  if (desc_) lt.desc_destroy(desc_);
  for (auto* l : {a_, b_, d_}) {
    if (l) lt.layout_destroy(l);
  }
  desc_ = nullptr;
  a_ = b_ = d_ = nullptr;
}

bool ConvGemm::prepare(DataType dtype, int64_t m, int64_t k, int64_t c, bool bias, bool relu,
                       bool residual, size_t workspace_bytes) {
  const CublasLtApi& lt = cublaslt();
  if (!lt.ok()) return false;
  reset();
  residual_ = residual;
  const cudaDataType_t type = dtype == DataType::Float16 ? CUDA_R_16F : CUDA_R_32F;
  // float32 computes in float32 (no TF32), as the cuDNN path does.
  lt_check(lt.desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cuBLASLt matmul desc");
  // Column-major view: D[k, m] = W'[k, c] * X'[c, m], W' the [K, C] weights transposed back.
  const cublasOperation_t trans = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  lt_check(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), "transa");
  lt_check(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)), "transb");
  if (bias || relu) {
    const cublasLtEpilogue_t e = bias
                                     ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : CUBLASLT_EPILOGUE_RELU;
    lt_check(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)), "epilogue");
  }
  lt_check(lt.layout_create(&a_, type, c, k, c), "cuBLASLt layout");
  lt_check(lt.layout_create(&b_, type, c, m, c), "cuBLASLt layout");
  lt_check(lt.layout_create(&d_, type, k, m, k), "cuBLASLt layout");
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(lt.pref_create(&pref), "cuBLASLt preference");
  const uint64_t ws = workspace_bytes;
  lt_check(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
           "cuBLASLt workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = lt.heuristic(lt.handle, desc_, a_, b_, d_, d_, pref, 1, &result, &found);
  lt.pref_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  algo_ = result.algo;
  workspace_ = result.workspaceSize;
  return true;
}

void ConvGemm::run(const void* x, const void* w, const void* bias, const void* z, void* y,
                   void* workspace, hipStream_t stream) const {
  const CublasLtApi& lt = cublaslt();
  if (bias) {
    lt_check(lt.desc_set(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "cuBLASLt bias pointer");
  }
  const float alpha = 1.f, beta = residual_ ? 1.f : 0.f;
  lt_check(lt.matmul(lt.handle, desc_, &alpha, w, a_, x, b_, &beta, residual_ ? z : y, d_, y, d_,
                     &algo_, workspace, workspace_, stream),
           "cublasLtMatmul (1x1 convolution)");
}

}  // namespace kiln::backends::gpu
#endif
