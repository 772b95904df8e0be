// CUDA shared memory's device side: the GPU backend library (loaded on first use, as for a
// KIND_GPU model) opens the client's IPC handle on the GPU it names and copies between that
// memory and the host. Nothing here includes a GPU header: the backend's interface is plain C++.
#include <fmt/format.h>

#include "backends/backend_registry.hpp"
#include "backends/gpu/gpu_backend.hpp"
#include "core/error.hpp"
#include "server/shared_memory.hpp"

namespace kiln::server {
namespace {

static_assert(kCudaIpcHandleBytes == backends::kGpuIpcHandleBytes);

// The GPU backend of unit `device` ("gpu:N"), or Unavailable with the loader's reason. The
// registry holds only GPU backends (the loader's) under "gpu", so the cast is the one the
// loader made in reverse (no RTTI across the library boundary).
backends::GpuBackend& gpu_backend(int64_t device) {
  backends::Backend& b = backends::BackendRegistry::instance().get(
      device == 0 ? "gpu" : fmt::format("gpu:{}", device));
  KILN_CHECK(b.device_kind() == backends::DeviceKind::Gpu, ErrorCode::Internal,
             "device 'gpu:{}' is not a GPU backend", device);
  return static_cast<backends::GpuBackend&>(b);
}

class GpuSharedMemory final : public DeviceSharedMemory {
 public:
  GpuSharedMemory(backends::GpuBackend& gpu, void* base, std::unique_ptr<backends::Stream> stream)
      : gpu_(gpu), base_(static_cast<std::byte*>(base)), stream_(std::move(stream)) {}
  ~GpuSharedMemory() override { gpu_.close_ipc_memory(base_); }

  void copy_to_host(uint64_t offset, std::span<std::byte> to) override {
    if (to.empty()) return;
    gpu_.copy_to_host(to.data(), base_ + offset, to.size(), *stream_);
    stream_->synchronize();
  }
  void copy_from_host(uint64_t offset, std::span<const std::byte> from) override {
    if (from.empty()) return;
    gpu_.copy_to_device(base_ + offset, from.data(), from.size(), *stream_);
    // The client reads its memory once the response arrives: the copy must be complete.
    stream_->synchronize();
  }

 private:
  backends::GpuBackend& gpu_;
  std::byte* base_;
  // The region's own stream: its copies never wait behind a model's work on the backend's.
  // Requests using one region concurrently share it (streams are thread-safe; each copy waits
  // for the stream, so for the other's copies too, never for a wrong result).
  std::unique_ptr<backends::Stream> stream_;
};

}  // namespace

std::unique_ptr<DeviceSharedMemory> open_gpu_shared_memory(std::span<const std::byte> handle,
                                                           int64_t device_id, uint64_t byte_size) {
  // The first GPU says how many there are: a device_id past them is refused before a backend is
  // opened for it (the registry keeps one per unit asked for, failed or not).
  const int count = gpu_backend(0).device_info().device_count;
  KILN_CHECK_ARG(device_id >= 0 && device_id < count,
                 "no GPU {}: the GPU runtime sees {} GPU{} (device_id 0 to {})", device_id, count,
                 count == 1 ? "" : "s", count - 1);
  backends::GpuBackend& gpu = gpu_backend(device_id);
  std::unique_ptr<backends::Stream> stream = gpu.create_stream();
  uint64_t extent = 0;
  void* base = gpu.open_ipc_memory(handle.data(), handle.size(), &extent);
  // Closes the handle from here on.
  auto memory = std::make_unique<GpuSharedMemory>(gpu, base, std::move(stream));
  // A copy past the exported allocation would fault the device, not just fail: the byte size is
  // checked against the allocation where the runtime can tell, else against the device.
  if (extent > 0) {
    KILN_CHECK_ARG(byte_size <= extent,
                   "invalid args (byte_size {} is past the end of the shared allocation, {} "
                   "bytes)",
                   byte_size, extent);
  } else {
    const uint64_t total = gpu.device_info().total_memory;
    KILN_CHECK_ARG(byte_size <= total,
                   "invalid args (byte_size {} is more than GPU {} holds, {} bytes)", byte_size,
                   device_id, total);
  }
  return memory;
}

}  // namespace kiln::server
