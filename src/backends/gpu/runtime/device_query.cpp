#include "backends/gpu/runtime/device_query.hpp"

#include <dlfcn.h>

#include <string>

#include <fmt/format.h>

#include "backends/gpu/runtime/gpu_check.hpp"

namespace kiln::backends::gpu {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor; HIP as 10^7 * major + 10^5 * minor +
// patch.
std::string runtime_version_string(int v) {
#if defined(__HIP__)
  return fmt::format("{}.{}.{}", v / 10000000, v / 100000 % 100, v % 100000);
#else
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
#endif
}

std::vector<std::string> split_list(const char* list) {
  std::vector<std::string> out;
  std::string item;
  for (const char* p = list; *p; ++p) {
    if (*p == ',') {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else {
      item += *p;
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

void* open_library(const char* soname, GpuLibraryVersion& out) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    out.missing = why ? why : soname;
  }
  return handle;
}

#if !defined(__HIP__)
// The library's own "version as one number" call: major * 10000 + minor * 100 + patch for
// cuBLASLt (13.1.0 -> 130100) and cuDNN 9 (9.14.0 -> 91400).
GpuLibraryVersion numbered_version(const char* name, const char* soname, const char* symbol) {
  GpuLibraryVersion v{name, {}, {}};
  void* handle = open_library(soname, v);
  if (!handle) return v;
  auto fn = reinterpret_cast<size_t (*)()>(dlsym(handle, symbol));
  if (!fn) {
    v.missing = fmt::format("{} has no {}", soname, symbol);
    return v;
  }
  size_t n = fn();
  v.version = fmt::format("{}.{}.{}", n / 10000, n / 100 % 100, n % 100);
  return v;  // left loaded: the kernels that use it will load it anyway
}
#endif

}  // namespace

int device_count() {
  int count = 0;
  hipError_t status = hipGetDeviceCount(&count);
  if (status == hipErrorInsufficientDriver) {
    (void)hipGetLastError();
    fail(ErrorCode::Unavailable, "no {} driver ({}: {})", kRuntimeName, hipGetErrorName(status),
         hipGetErrorString(status));
  }
  if (status == hipErrorNoDevice || (status == hipSuccess && count == 0)) {
    (void)hipGetLastError();
    fail(ErrorCode::Unavailable, "no device: the {} runtime sees no GPU ({})", kRuntimeName,
         status == hipSuccess ? "device count 0" : hipGetErrorString(status));
  }
  if (status != hipSuccess) {
    (void)hipGetLastError();
    fail(ErrorCode::Unavailable, "the {} runtime did not start: {} ({})", kRuntimeName,
         hipGetErrorName(status), hipGetErrorString(status));
  }
  return count;
}

GpuDeviceInfo query_device(int index) {
  GpuDeviceInfo info;
  info.index = index;
  KILN_GPU_CHECK(hipGetDeviceCount(&info.device_count));
  KILN_GPU_CHECK(hipSetDevice(index));
  hipDeviceProp_t prop{};
  KILN_GPU_CHECK(hipGetDeviceProperties(&prop, index));
  info.name = prop.name;
#if defined(__HIP__)
  info.target = hip_target(prop.gcnArchName);
#else
  info.target = cuda_target(prop.major, prop.minor);
#endif
  info.wavefront_size = prop.warpSize;
  info.multiprocessors = prop.multiProcessorCount;
  int clock_khz = 0;
  // CUDA 13 dropped clockRate from the properties struct; the attribute exists in both.
  KILN_GPU_CHECK(hipDeviceGetAttribute(&clock_khz, hipDeviceAttributeClockRate, index));
  info.clock_mhz = clock_khz / 1000;
  size_t free_bytes = 0, total_bytes = 0;
  KILN_GPU_CHECK(hipMemGetInfo(&free_bytes, &total_bytes));
  info.total_memory = total_bytes;
  info.free_memory = free_bytes;
  info.matrix_instructions = matrix_instructions(info.target);
  int version = 0;
  KILN_GPU_CHECK(hipRuntimeGetVersion(&version));
  info.runtime_version = runtime_version_string(version);
  KILN_GPU_CHECK(hipDriverGetVersion(&version));
  info.driver_version = runtime_version_string(version);
  char bus[32] = {};
  KILN_GPU_CHECK(hipDeviceGetPCIBusId(bus, sizeof(bus), index));
  info.pci_bus_id = bus;
  info.compiled_archs = split_list(KILN_GPU_ARCHS);
  info.libraries = vendor_library_versions();
  return info;
}

std::vector<GpuLibraryVersion> vendor_library_versions() {
  std::vector<GpuLibraryVersion> out;
#if defined(__HIP__)
  {
    GpuLibraryVersion v{"rocBLAS", {}, {}};
    if (void* h = open_library("librocblas.so.0", v)) {
      using Fn = int (*)(char*, size_t);
      auto fn = reinterpret_cast<Fn>(dlsym(h, "rocblas_get_version_string"));
      char text[128] = {};
      if (fn && fn(text, sizeof(text)) == 0)
        v.version = text;
      else
        v.missing = "librocblas.so.0 has no rocblas_get_version_string";
    }
    out.push_back(v);
  }
  {
    GpuLibraryVersion v{"MIOpen", {}, {}};
    if (void* h = open_library("libMIOpen.so.1", v)) {
      using Fn = int (*)(size_t*, size_t*, size_t*);
      auto fn = reinterpret_cast<Fn>(dlsym(h, "miopenGetVersion"));
      size_t major = 0, minor = 0, patch = 0;
      if (fn && fn(&major, &minor, &patch) == 0)
        v.version = fmt::format("{}.{}.{}", major, minor, patch);
      else
        v.missing = "libMIOpen.so.1 has no miopenGetVersion";
    }
    out.push_back(v);
  }
  {
    // hipBLASLt reports its version only through a handle; whether it loads is what matters
    // before its kernels exist.
    GpuLibraryVersion v{"hipBLASLt", {}, {}};
    if (open_library("libhipblaslt.so.0", v)) v.version = "present";
    out.push_back(v);
  }
#else
  out.push_back(numbered_version("cublasLt", "libcublasLt.so.13", "cublasLtGetVersion"));
  out.push_back(numbered_version("cudnn", "libcudnn.so.9", "cudnnGetVersion"));
#endif
  return out;
}

}  // namespace kiln::backends::gpu
