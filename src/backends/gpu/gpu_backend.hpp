#pragma once
// What the GPU backend adds to backends::Backend, and the boundary to the shared library that
// implements it (libkiln_gpu_cuda.so / libkiln_gpu_hip.so, loaded by load_gpu_backend()). This
// header is all the two sides share: plain C++ with no GPU headers, compiled by g++ in the main
// library and by nvcc/hipcc in the GPU library, so its layout must not depend on the compiler.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/gpu/gpu_arch.hpp"

namespace kiln::backends {

struct GpuLibraryVersion {
  std::string name;     // "cublasLt", "cudnn", "rocblas", "MIOpen"
  std::string version;  // "13.1.0"; empty with `missing` set when not loadable
  std::string missing;  // why it is not there ("libcudnn.so.9: cannot open shared object file")
};

// One device as the runtime reports it: what engines are stamped with, and what `kiln devices`
// prints.
struct GpuDeviceInfo {
  int index = 0;
  int device_count = 0;  // GPUs the runtime sees (indices 0 .. device_count - 1)
  std::string name;      // "NVIDIA H200", "AMD Instinct MI210"
  GpuTarget target;      // cuda:sm_90, hip:gfx90a:sramecc+:xnack-
  int wavefront_size = 0;
  int multiprocessors = 0;  // SMs on NVIDIA, CUs on AMD
  int clock_mhz = 0;
  uint64_t total_memory = 0;  // bytes
  uint64_t free_memory = 0;   // bytes, when the backend was opened
  std::vector<std::string> matrix_instructions;
  std::string runtime_version;              // "13.0" (CUDA runtime) / "5.2.21153" (HIP)
  std::string driver_version;               // the newest runtime the driver supports, "13.0"
  std::string pci_bus_id;                   // "0000:18:00.0"
  std::vector<std::string> compiled_archs;  // device code in this library ("sm_80", "sm_90")
  std::vector<GpuLibraryVersion> libraries;
};

// The GPU backend: Backend plus what only a GPU has. Streams are the runtime's (non-blocking,
// so they never serialize with the legacy default stream); events time with the device clock.
class GpuBackend : public Backend {
 public:
  virtual const GpuDeviceInfo& device_info() const = 0;
  // The backend's own two streams: kernels run on the first, host<->device copies of inputs and
  // outputs on the second, so that the next input uploads while the current run computes.
  virtual Stream& compute_stream() = 0;
  virtual Stream& copy_stream() = 0;
  // Page-locked host memory (host-addressable: data() is a host pointer). Copies from and to it
  // are DMA transfers that run asynchronously; copy_to_device/copy_to_host with other host
  // memory go through the backend's own pinned staging buffers.
  virtual DeviceBuffer allocate_pinned(size_t bytes) = 0;
  virtual void copy_device_to_device(void* device_dst, const void* device_src, size_t bytes,
                                     Stream& stream) = 0;
  // Sets `bytes` of device memory to `value` (queued on `stream`).
  virtual void fill_device(void* device_dst, uint8_t value, size_t bytes, Stream& stream) = 0;

  // Device memory another process shares through an IPC handle (the kGpuIpcHandleBytes of
  // cudaIpcGetMemHandle / hipIpcGetMemHandle), mapped on this backend's device: the base of the
  // allocation, which copy_to_host / copy_to_device then take as device memory. `bytes_to_end`
  // gets the bytes from that base to the end of the allocation where the runtime can tell (0
  // where it cannot). InvalidArgument with the runtime's reason when the handle does not open
  // (not a handle, freed, of another device, of this very process).
  virtual void* open_ipc_memory(const void* handle, size_t handle_bytes,
                                uint64_t* bytes_to_end) = 0;
  // Unmaps what open_ipc_memory returned (the exporting process still owns the memory).
  virtual void close_ipc_memory(void* device_ptr) = 0;
};

// The size of a CUDA / HIP IPC memory handle (cudaIpcMemHandle_t, hipIpcMemHandle_t).
inline constexpr size_t kGpuIpcHandleBytes = 64;

// Bumped whenever this header or backend.hpp changes a layout or a virtual function: the loader
// refuses a GPU library built against another version instead of crashing in it.
inline constexpr uint32_t kGpuBackendAbiVersion = 9;  // 9: IPC memory (CUDA shared memory)

}  // namespace kiln::backends

// The two C entry points of a GPU library. The loader first compares kiln_gpu_abi_version() and
// kiln_gpu_kiln_version() with its own, then calls kiln_gpu_open; on failure that returns null
// and fills `error` (an ErrorCode value and a message), since exceptions are only thrown across
// the boundary once both sides are known to agree.
extern "C" {
struct KilnGpuOpenError {
  int code;  // kiln::ErrorCode
  char message[1024];
};
using KilnGpuAbiVersionFn = uint32_t (*)();
using KilnGpuKilnVersionFn = const char* (*)();
using KilnGpuOpenFn = kiln::backends::GpuBackend* (*)(int device_index, KilnGpuOpenError* error);
}
