#include "backends/gpu/runtime/cublaslt_api.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <dlfcn.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace kiln::backends::gpu {
namespace {

CublasLtApi open_cublaslt() {
  CublasLtApi api;
  void* lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    api.error = fmt::format("cuBLASLt is not available ({})", dlerror());
    return api;
  }
  bool missing = false;
  auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn && !missing) {
      api.error = fmt::format("libcublasLt.so.13 lacks {}", symbol);
      missing = true;
    }
  };
  get(api.create, "cublasLtCreate");
  get(api.get_version, "cublasLtGetVersion");
  get(api.desc_create, "cublasLtMatmulDescCreate");
  get(api.desc_destroy, "cublasLtMatmulDescDestroy");
  get(api.desc_set, "cublasLtMatmulDescSetAttribute");
  get(api.layout_create, "cublasLtMatrixLayoutCreate");
  get(api.layout_destroy, "cublasLtMatrixLayoutDestroy");
  get(api.layout_set, "cublasLtMatrixLayoutSetAttribute");
  get(api.pref_create, "cublasLtMatmulPreferenceCreate");
  get(api.pref_destroy, "cublasLtMatmulPreferenceDestroy");
  get(api.pref_set, "cublasLtMatmulPreferenceSetAttribute");
  get(api.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  get(api.matmul, "cublasLtMatmul");
  if (missing) return api;
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
