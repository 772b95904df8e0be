#pragma once
// cuBLASLt, opened with dlopen the first time a GEMM kernel is asked for, so that the GPU
// library loads (and its element-wise kernels run) where cuBLASLt is missing; GEMM support then
// says why. NVIDIA only: on AMD, hipBLASLt would take this place (ROCm 5.2 has none).
#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <cublasLt.h>

#include <string>

namespace kiln::backends::gpu {

struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  cublasLtHandle_t handle = nullptr;  // one per process: kernels pass their own stream
  std::string error;                  // set when cuBLASLt could not be opened
  bool ok() const { return error.empty(); }
};

// The process's cuBLASLt (opened once; never throws: see `error`).
const CublasLtApi& cublaslt();

// Throws Internal naming `what` and the status when `s` is not success.
void lt_check(cublasStatus_t s, const char* what);

}  // namespace kiln::backends::gpu
#endif
