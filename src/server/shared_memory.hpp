#pragma once
// Triton's shared memory extensions: the registry of regions a client shares with the server, so
// inference inputs are read from and outputs written to memory the client shares instead of
// travelling in the request. Two kinds in one name space, as tritonserver's: system regions (a
// POSIX shm object, an offset and a byte size) and CUDA regions (device memory another process
// exports with cudaIpcGetMemHandle, opened through the GPU backend). Untrusted input: names and
// keys are checked, the range must lie inside the object or allocation, a system object must be
// a regular shm object owned by the server's effective uid (a client must not make the server
// read or write another user's memory), and the number of regions and their host bytes are
// bounded before anything is opened for good. A region unregistered while a request uses it
// stays open until that request lets go of it (shared ownership); a system region's bytes count
// against the bound until then.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::server {

struct SharedMemoryLimits {
  size_t max_regions = 128;       // --shared-memory-max-regions (system and CUDA regions)
  uint64_t max_mapped_bytes = 0;  // --shared-memory-max-bytes; 0: physical memory
  size_t max_name_bytes = 256;    // a region's name
};

enum class SharedMemoryKind { System, Cuda };

// The highest CUDA device_id a registration may name before any GPU is asked (the GPU backend
// then checks it against the devices there are): bounds what a client can make the server try.
inline constexpr int64_t kMaxCudaDeviceId = 255;

// What the status endpoints list for one region.
struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;      // system regions: the POSIX shm object
  uint64_t offset = 0;  // system regions: where the region starts in the object
  uint64_t byte_size = 0;
  SharedMemoryKind kind = SharedMemoryKind::System;
  int64_t device_id = 0;  // CUDA regions: the GPU holding the memory
};

// One registered region of either kind, kept open until its last holder (the registry or a
// request using it) lets go. Reads and writes check the range first (offsets from the region's
// start) and copy: a request's inputs become host tensors (one copy, which the request memory
// budget pays for) and its outputs are copied into the region.
class SharedMemoryRegion {
 public:
  explicit SharedMemoryRegion(SharedMemoryRegionStatus status) : status_(std::move(status)) {}
  virtual ~SharedMemoryRegion() = default;
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const SharedMemoryRegionStatus& status() const { return status_; }
  const std::string& name() const { return status_.name; }
  SharedMemoryKind kind() const { return status_.kind; }
  // InvalidArgument in tritonserver's words unless [offset, offset + byte_size) lies inside the
  // region; overflow-safe.
  void check_range(uint64_t offset, uint64_t byte_size) const;
  // Copies the region's bytes at `offset` into `to` / `from` into them (the range checked
  // first).
  void read(uint64_t offset, std::span<std::byte> to) const {
    check_range(offset, to.size());
    read_at(offset, to);
  }
  void write(uint64_t offset, std::span<const std::byte> from) const {
    check_range(offset, from.size());
    write_at(offset, from);
  }

 protected:
  // The range is checked.
  virtual void read_at(uint64_t offset, std::span<std::byte> to) const = 0;
  virtual void write_at(uint64_t offset, std::span<const std::byte> from) const = 0;

 private:
  SharedMemoryRegionStatus status_;
};

// A system region: the object's descriptor.
//
// The server reads and writes the object through its descriptor (pread / pwrite), never through
// a mapping: a client may shrink its object at any time, and touching a mapped page past the
// new end kills the process (SIGBUS); a read past it is only short, which is refused
// (InvalidArgument: "... was it shrunk after registering?").
class SystemSharedMemoryRegion final : public SharedMemoryRegion {
 public:
  SystemSharedMemoryRegion(SharedMemoryRegionStatus status, int fd, size_t length,
                           std::shared_ptr<std::atomic<uint64_t>> mapped_bytes);
  ~SystemSharedMemoryRegion() override;

 private:
  void read_at(uint64_t offset, std::span<std::byte> to) const override;
  void write_at(uint64_t offset, std::span<const std::byte> from) const override;

  int fd_;
  size_t length_;  // counted in the registry's bytes
  std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
};

// The device side of a CUDA region: memory another process exports with an IPC handle, opened
// on one GPU; closed by its destructor. Offsets are from the start of the exported memory and
// already checked.
class DeviceSharedMemory {
 public:
  virtual ~DeviceSharedMemory() = default;
  // Device -> host and host -> device, returning when the copy is complete.
  virtual void copy_to_host(uint64_t offset, std::span<std::byte> to) = 0;
  virtual void copy_from_host(uint64_t offset, std::span<const std::byte> from) = 0;
};

// Opens `handle` (kCudaIpcHandleBytes) on GPU `device_id` for `byte_size` bytes, or throws
// saying why (no GPU, no such device, a handle that does not open, a byte size past the end of
// the exported allocation).
using DeviceSharedMemoryOpener = std::function<std::unique_ptr<DeviceSharedMemory>(
    std::span<const std::byte> handle, int64_t device_id, uint64_t byte_size)>;

// The GPU backend's opener (cuda_shared_memory.cpp): the backend library of device `device_id`
// (loaded on first use), its IPC open, and copies on a stream of the region's own.
std::unique_ptr<DeviceSharedMemory> open_gpu_shared_memory(std::span<const std::byte> handle,
                                                           int64_t device_id, uint64_t byte_size);

// The size of a cudaIpcMemHandle_t (and of HIP's hipIpcMemHandle_t).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// A CUDA region: device memory, copied to and from the host through the GPU backend.
class CudaSharedMemoryRegion final : public SharedMemoryRegion {
 public:
  CudaSharedMemoryRegion(SharedMemoryRegionStatus status,
                         std::unique_ptr<DeviceSharedMemory> memory)
      : SharedMemoryRegion(std::move(status)), memory_(std::move(memory)) {}

 private:
  void read_at(uint64_t offset, std::span<std::byte> to) const override {
    memory_->copy_to_host(offset, to);
  }
  void write_at(uint64_t offset, std::span<const std::byte> from) const override {
    memory_->copy_from_host(offset, from);
  }

  std::unique_ptr<DeviceSharedMemory> memory_;
};

class SharedMemoryRegistry {
 public:
  // `open_device` opens CUDA regions; empty: open_gpu_shared_memory (tests give their own).
  explicit SharedMemoryRegistry(SharedMemoryLimits limits = {},
                                DeviceSharedMemoryOpener open_device = {});

  // Maps `byte_size` bytes at `offset` of the POSIX shm object `key` as region `name`. Throws
  // with tritonserver's words and status where it has them: a name already registered
  // (InvalidArgument "... already in manager"), a key that does not open (Internal "Unable to
  // open shared memory region"), a range outside the object (InvalidArgument "failed to register
  // shared memory region '<name>': invalid args"); Kiln's own checks (names, keys, ownership,
  // the limits) answer InvalidArgument, or Unavailable for a full registry.
  void register_region(const std::string& name, const std::string& key, uint64_t offset,
                       uint64_t byte_size);
  // Opens the device memory behind `raw_handle` (a cudaIpcMemHandle_t's kCudaIpcHandleBytes)
  // on GPU `device_id` as CUDA region `name` of `byte_size` bytes. Names, handle size, byte
  // size, device id, duplicates and the region limit are checked before any GPU is asked; the
  // opening itself runs outside the registry's lock (the first one loads the GPU library).
  // Every failure to open is tritonserver's InvalidArgument "failed to register CUDA shared
  // memory region '<name>': <why>" (on a machine without a GPU: the loader's reason).
  void register_cuda_region(const std::string& name, std::span<const std::byte> raw_handle,
                            int64_t device_id, uint64_t byte_size);
  // Forgets `name` if it is a region of `kind` (nothing otherwise, as tritonserver); requests
  // using it keep it open.
  void unregister(std::string_view name, SharedMemoryKind kind = SharedMemoryKind::System);
  void unregister_all(SharedMemoryKind kind = SharedMemoryKind::System);
  // Every region of `kind` (empty `name`), or the one named: NotFound "Unable to find system
  // shared memory region: '<name>'" ("cuda" for CUDA), or tritonserver's "The region named
  // '<name>' is registered as ..." when it is of the other kind.
  std::vector<SharedMemoryRegionStatus> status(
      std::string_view name = {}, SharedMemoryKind kind = SharedMemoryKind::System) const;
  // The region a request names, held while the request uses it: NotFound "Unable to find
  // shared memory region: '<name>'".
  std::shared_ptr<SharedMemoryRegion> get(std::string_view name) const;

  const SharedMemoryLimits& limits() const { return limits_; }
  // Bytes registered now, regions still held by requests after their unregistering included.
  uint64_t mapped_bytes() const { return mapped_bytes_->load(); }

 private:
  SharedMemoryLimits limits_;
  DeviceSharedMemoryOpener open_device_;
  std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<SharedMemoryRegion>, std::less<>> regions_;
};

// InvalidArgument unless `name` is 1 to `max_bytes` bytes of [A-Za-z0-9_.:-].
void check_region_name(std::string_view name, size_t max_bytes);

}  // namespace kiln::server
