#pragma once
// Triton's system shared memory extension: the registry of regions a client maps into the
// server (a POSIX shm object, an offset and a byte size), so inference inputs are read from and
// outputs written to memory the client shares instead of travelling in the request. Untrusted
// input: names and keys are checked, the range must lie inside the object, the object must be a
// regular shm object owned by the server's effective uid (a client must not make the server read
// or write another user's memory), and the number of regions and their bytes are bounded before
// anything is opened for good. A region unregistered while a request uses it stays open until
// that request lets go of it (shared ownership); its bytes count against the bound until then.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::server {

struct SharedMemoryLimits {
  size_t max_regions = 128;       // --shared-memory-max-regions
  uint64_t max_mapped_bytes = 0;  // --shared-memory-max-bytes; 0: physical memory
  size_t max_name_bytes = 256;    // a region's name
};

// What the status endpoints list for one region.
struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// One registered region: the object's descriptor, kept open until its last holder (the
// registry or a request using it) lets go.
//
// The server reads and writes the object through its descriptor (pread / pwrite), never through
// a mapping: a client may shrink its object at any time, and touching a mapped page past the
// new end kills the process (SIGBUS); a read past it is only short, which is refused. It costs
// one copy of each input, which the request memory budget pays for.
class SharedMemoryRegion {
 public:
  SharedMemoryRegion(SharedMemoryRegionStatus status, int fd, size_t length,
                     std::shared_ptr<std::atomic<uint64_t>> mapped_bytes);
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const SharedMemoryRegionStatus& status() const { return status_; }
  const std::string& name() const { return status_.name; }
  // InvalidArgument in tritonserver's words unless [offset, offset + byte_size) lies inside the
  // region (offsets from the region's start, not the object's); overflow-safe.
  void check_range(uint64_t offset, uint64_t byte_size) const;
  // Copies the region's bytes at `offset` into `to` / `from` into them (the range checked
  // first). InvalidArgument when the object has shrunk below the range since it was registered.
  void read(uint64_t offset, std::span<std::byte> to) const;
  void write(uint64_t offset, std::span<const std::byte> from) const;

 private:
  SharedMemoryRegionStatus status_;
  int fd_;
  size_t length_;  // counted in the registry's bytes
  std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(SharedMemoryLimits limits = {});

  // Maps `byte_size` bytes at `offset` of the POSIX shm object `key` as region `name`. Throws
  // with tritonserver's words and status where it has them: a name already registered
  // (InvalidArgument "... already in manager"), a key that does not open (Internal "Unable to
  // open shared memory region"), a range outside the object (InvalidArgument "failed to register
  // shared memory region '<name>': invalid args"); Kiln's own checks (names, keys, ownership,
  // the limits) answer InvalidArgument, or Unavailable for a full registry.
  void register_region(const std::string& name, const std::string& key, uint64_t offset,
                       uint64_t byte_size);
  // Forgets `name` (nothing when unknown, as tritonserver); requests using it keep its mapping.
  void unregister(std::string_view name);
  void unregister_all();
  // Every region (empty `name`), or the one named: NotFound "Unable to find system shared
  // memory region: '<name>'".
  std::vector<SharedMemoryRegionStatus> status(std::string_view name = {}) const;
  // The region a request names, held while the request uses it: NotFound "Unable to find
  // shared memory region: '<name>'".
  std::shared_ptr<SharedMemoryRegion> get(std::string_view name) const;

  const SharedMemoryLimits& limits() const { return limits_; }
  // Bytes registered now, regions still held by requests after their unregistering included.
  uint64_t mapped_bytes() const { return mapped_bytes_->load(); }

 private:
  SharedMemoryLimits limits_;
  std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<SharedMemoryRegion>, std::less<>> regions_;
};

// The answer to registering CUDA shared memory: Kiln serves system shared memory only.
inline constexpr std::string_view kCudaSharedMemoryUnsupported =
    "CUDA shared memory is not supported by this server: it serves system shared memory only "
    "(the GPU backend has not been run with CUDA IPC handles)";

// InvalidArgument unless `name` is 1 to `max_bytes` bytes of [A-Za-z0-9_.:-].
void check_region_name(std::string_view name, size_t max_bytes);

}  // namespace kiln::server
