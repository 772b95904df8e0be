#include "backends/gpu/runtime/cublaslt_api.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/vendor_library.hpp"

namespace kiln::backends::gpu {
namespace {

CublasLtApi open_cublaslt() {
  CublasLtApi api;
  VendorLibrary lib("libcublasLt.so.13", "cuBLASLt");
  lib.get(api.create, "cublasLtCreate");
  lib.get(api.get_version, "cublasLtGetVersion");
  lib.get(api.desc_create, "cublasLtMatmulDescCreate");
  lib.get(api.desc_destroy, "cublasLtMatmulDescDestroy");
  lib.get(api.desc_set, "cublasLtMatmulDescSetAttribute");
  lib.get(api.layout_create, "cublasLtMatrixLayoutCreate");
  lib.get(api.layout_destroy, "cublasLtMatrixLayoutDestroy");
  lib.get(api.layout_set, "cublasLtMatrixLayoutSetAttribute");
  lib.get(api.pref_create, "cublasLtMatmulPreferenceCreate");
  lib.get(api.pref_destroy, "cublasLtMatmulPreferenceDestroy");
  lib.get(api.pref_set, "cublasLtMatmulPreferenceSetAttribute");
  lib.get(api.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  lib.get(api.matmul, "cublasLtMatmul");
  if (!lib.ok()) {
    api.error = lib.error();
    return api;
  }
  cublasStatus_t s = api.create(&api.handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    api.error = fmt::format("cublasLtCreate failed (status {})", static_cast<int>(s));
  }
  return api;
}

}  // namespace

void lt_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    fail(ErrorCode::Internal, "{} failed (cuBLAS status {})", what, static_cast<int>(s));
  }
}

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = open_cublaslt();
  return api;
}

}  // namespace kiln::backends::gpu
#endif
