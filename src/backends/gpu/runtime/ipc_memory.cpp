// Device memory shared by another process through an IPC handle (Triton's CUDA shared memory):
// opened on the backend's device, its allocation's extent asked of the runtime so that the
// server can refuse a registration larger than the memory behind the handle (a copy past it
// would fault the device, not just fail).
#include <dlfcn.h>

#include <cstring>

#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"

namespace kiln::backends::gpu {
namespace {

static_assert(sizeof(hipIpcMemHandle_t) == kGpuIpcHandleBytes);

// The bytes from `ptr` to the end of the allocation holding it; 0 when the runtime cannot say.
uint64_t allocation_bytes_after(void* ptr) {
#if defined(__HIP__)
  hipDeviceptr_t base = nullptr;
  size_t size = 0;
  if (hipMemGetAddressRange(&base, &size, ptr) != hipSuccess) {
    (void)hipGetLastError();
    return 0;
  }
  const uintptr_t b = reinterpret_cast<uintptr_t>(base), p = reinterpret_cast<uintptr_t>(ptr);
#else
  // CUDA's runtime API has no address-range query; the driver's cuMemGetAddressRange has, and
  // the driver library is loaded once the runtime is (RTLD_NOLOAD: never load another).
  using RangeFn = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);
  static const RangeFn range = []() -> RangeFn {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    return driver ? reinterpret_cast<RangeFn>(dlsym(driver, "cuMemGetAddressRange_v2")) : nullptr;
  }();
  unsigned long long base = 0;
  size_t size = 0;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  if (!range || range(&base, &size, static_cast<unsigned long long>(p)) != 0) return 0;
  const uintptr_t b = static_cast<uintptr_t>(base);
#endif
  if (p < b || p - b >= size) return 0;
  return static_cast<uint64_t>(size - (p - b));
}

}  // namespace

void* GpuBackendImpl::open_ipc_memory(const void* handle, size_t handle_bytes,
                                      uint64_t* bytes_to_end) {
  KILN_CHECK_ARG(handle && handle_bytes == sizeof(hipIpcMemHandle_t),
                 "an IPC memory handle is {} bytes, not {}", sizeof(hipIpcMemHandle_t),
                 handle_bytes);
  hipIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof(h));
  KILN_GPU_CHECK(hipSetDevice(device_));
  void* ptr = nullptr;
  const hipError_t status = hipIpcOpenMemHandle(&ptr, h, hipIpcMemLazyEnablePeerAccess);
  if (status != hipSuccess) {
    (void)hipGetLastError();
    fail(ErrorCode::InvalidArgument, "failed to open {} IPC handle: {} ({})", kRuntimeName,
         hipGetErrorString(status), hipGetErrorName(status));
  }
  if (bytes_to_end) *bytes_to_end = allocation_bytes_after(ptr);
  return ptr;
}

void GpuBackendImpl::close_ipc_memory(void* device_ptr) {
  if (!device_ptr) return;
  (void)hipSetDevice(device_);
  if (hipIpcCloseMemHandle(device_ptr) != hipSuccess) (void)hipGetLastError();
}

}  // namespace kiln::backends::gpu
