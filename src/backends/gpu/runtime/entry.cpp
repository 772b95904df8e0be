// The C entry points of the GPU library (see gpu_backend.hpp): the only symbols it exports.
#include <cstdio>
#include <exception>

#include "backends/gpu/runtime/device_query.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"

#define KILN_GPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

void set_error(KilnGpuOpenError* error, kiln::ErrorCode code, const char* message) {
  if (!error) return;
  error->code = static_cast<int>(code);
  std::snprintf(error->message, sizeof(error->message), "%s", message);
}

}  // namespace

KILN_GPU_EXPORT uint32_t kiln_gpu_abi_version() {
  return kiln::backends::kGpuBackendAbiVersion;
}

KILN_GPU_EXPORT const char* kiln_gpu_kiln_version() {
  return KILN_VERSION;
}

KILN_GPU_EXPORT kiln::backends::GpuBackend* kiln_gpu_open(int device_index,
                                                          KilnGpuOpenError* error) {
  using namespace kiln;
  try {
    int count = backends::gpu::device_count();
    KILN_CHECK(device_index >= 0 && device_index < count, ErrorCode::NotFound,
               "no device {}: the {} runtime sees {} GPU{}", device_index,
               backends::gpu::kRuntimeName, count, count == 1 ? "" : "s");
    return new backends::gpu::GpuBackendImpl(device_index);
  } catch (const Error& e) {
    set_error(error, e.code(), e.message().c_str());
  } catch (const std::exception& e) {
    set_error(error, ErrorCode::Internal, e.what());
  }
  return nullptr;
}
