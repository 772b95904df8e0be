#pragma once
// Turns a failed HIP/CUDA runtime call into a kiln::Error naming the call and the runtime's own
// error name, and clears the runtime's last-error state so the next call does not see it.
#include "backends/gpu/vendor.hpp"
#include "core/error.hpp"

namespace kiln::backends::gpu {

// "CUDA" or "HIP": the runtime's name in messages.
#if defined(__HIP__)
inline constexpr const char* kRuntimeName = "HIP";
#else
inline constexpr const char* kRuntimeName = "CUDA";
#endif

[[noreturn]] inline void runtime_fail(hipError_t status, const char* what,
                                      ErrorCode code = ErrorCode::Internal) {
  (void)hipGetLastError();
  fail(code, "{} failed: {} ({})", what, hipGetErrorName(status), hipGetErrorString(status));
}

}  // namespace kiln::backends::gpu

#define KILN_GPU_CHECK(call)                                        \
  do {                                                              \
    hipError_t kiln_gpu_status_ = (call);                           \
    if (kiln_gpu_status_ != hipSuccess)                             \
      ::kiln::backends::gpu::runtime_fail(kiln_gpu_status_, #call); \
  } while (0)
