#include "server/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>  // shm_open
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace kiln::server {
namespace {

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{16} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// A POSIX shm name as shm_open takes it: an optional leading '/', then one file name (no other
// '/', not "." or "..", no NUL) of at most NAME_MAX bytes. glibc refuses most of these itself;
// checking first keeps the refusal's reason clear and never lets a key reach another directory.
void check_key(const std::string& name, const std::string& key) {
  std::string_view file(key);
  if (!file.empty() && file.front() == '/') file.remove_prefix(1);
  const bool ok = !file.empty() && file.size() <= 255 && file != "." && file != ".." &&
                  file.find('/') == std::string_view::npos &&
                  file.find('\0') == std::string_view::npos;
  KILN_CHECK_ARG(ok,
                 "failed to register shared memory region '{}': invalid args (key '{}' is not a "
                 "POSIX shared memory name: '/' and then 1 to 255 bytes without '/')",
                 name, key);
}

// Closes a descriptor when the registration is done with it, whatever happens.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void check_region_name(std::string_view name, size_t max_bytes) {
  bool ok = !name.empty() && name.size() <= max_bytes;
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == ':' || c == '-');
  }
  // Print a refused name only when it is short and plain: it came from the client.
  KILN_CHECK_ARG(ok,
                 "invalid shared memory region name{}: a name is 1 to {} bytes of letters, digits "
                 "and '_', '.', ':', '-'",
                 ok || name.size() > 64 ? std::string() : fmt::format(" '{}'", name), max_bytes);
}

SystemSharedMemoryRegion::SystemSharedMemoryRegion(
    SharedMemoryRegionStatus status, int fd, size_t length,
    std::shared_ptr<std::atomic<uint64_t>> mapped_bytes)
    : SharedMemoryRegion(std::move(status)),
      fd_(fd),
      length_(length),
      mapped_bytes_(std::move(mapped_bytes)) {}

SystemSharedMemoryRegion::~SystemSharedMemoryRegion() {
  ::close(fd_);
  mapped_bytes_->fetch_sub(length_);
}

void SystemSharedMemoryRegion::read_at(uint64_t offset, std::span<std::byte> to) const {
  const SharedMemoryRegionStatus& region = status();
  uint64_t at = region.offset + offset;
  size_t done = 0;
  while (done < to.size()) {
    const ssize_t n = ::pread(fd_, to.data() + done, to.size() - done, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    KILN_CHECK(n > 0, ErrorCode::InvalidArgument,
               "shared memory region '{}' could not be read: '{}' ends before the registered "
               "range ({}; was it shrunk after registering?)",
               region.name, region.key, n < 0 ? std::strerror(errno) : "end of object");
    done += static_cast<size_t>(n);
    at += static_cast<uint64_t>(n);
  }
}

void SystemSharedMemoryRegion::write_at(uint64_t offset, std::span<const std::byte> from) const {
  const SharedMemoryRegionStatus& region = status();
  const uint64_t at = region.offset + offset;
  // pwrite past the end would grow the client's object: refuse a shrunk one instead.
  struct stat st {};
  KILN_CHECK(::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) >= at + from.size(),
             ErrorCode::InvalidArgument,
             "shared memory region '{}' could not be written: '{}' ends before the registered "
             "range (was it shrunk after registering?)",
             region.name, region.key);
  size_t done = 0;
  while (done < from.size()) {
    const ssize_t n =
        ::pwrite(fd_, from.data() + done, from.size() - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    KILN_CHECK(n > 0, ErrorCode::Internal, "shared memory region '{}' could not be written: {}",
               region.name, n < 0 ? std::strerror(errno) : "nothing written");
    done += static_cast<size_t>(n);
  }
}

void SharedMemoryRegion::check_range(uint64_t offset, uint64_t byte_size) const {
  // tritonserver's words; which numbers in parentheses.
  KILN_CHECK_ARG(offset < status_.byte_size,
                 "Invalid offset for shared memory region: '{}' (offset {}, the region holds {} "
                 "bytes)",
                 status_.name, offset, status_.byte_size);
  KILN_CHECK_ARG(byte_size <= status_.byte_size - offset,
                 "Invalid offset + byte size for shared memory region: '{}' (offset {} + byte "
                 "size {}, the region holds {} bytes)",
                 status_.name, offset, byte_size, status_.byte_size);
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryLimits limits,
                                           DeviceSharedMemoryOpener open_device)
    : limits_(limits),
      open_device_(std::move(open_device)),
      mapped_bytes_(std::make_shared<std::atomic<uint64_t>>(0)) {
  if (limits_.max_mapped_bytes == 0) limits_.max_mapped_bytes = physical_memory_bytes();
  if (!open_device_) open_device_ = open_gpu_shared_memory;
}

void SharedMemoryRegistry::register_region(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  check_region_name(name, limits_.max_name_bytes);
  check_key(name, key);
  KILN_CHECK_ARG(byte_size > 0,
                 "failed to register shared memory region '{}': invalid args "
                 "(byte_size must be above 0)",
                 name);
  // One registration at a time: the name, count and byte checks and the mapping stay atomic.
  std::lock_guard lock(mutex_);
  KILN_CHECK_ARG(!regions_.count(name), "shared memory region '{}' already in manager", name);
  KILN_CHECK(regions_.size() < limits_.max_regions, ErrorCode::Unavailable,
             "failed to register shared memory region '{}': {} regions are registered, the "
             "most this server takes (--shared-memory-max-regions)",
             name, regions_.size());

  // O_NOFOLLOW: a link another user left in /dev/shm must not lead the server elsewhere;
  // O_NONBLOCK: opening a FIFO planted there must not hang the request.
  const int fd = ::shm_open(key.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
  KILN_CHECK(fd >= 0, ErrorCode::Internal, "Unable to open shared memory region: '{}' ({})", key,
             std::strerror(errno));
  FdCloser closer{fd};
  struct stat st {};
  KILN_CHECK(::fstat(fd, &st) == 0 && st.st_size >= 0, ErrorCode::Internal,
             "Invalid shared memory region: '{}' ({})", key, std::strerror(errno));
  KILN_CHECK_ARG(S_ISREG(st.st_mode),
                 "failed to register shared memory region '{}': invalid args ('{}' is not a "
                 "regular shared memory object)",
                 name, key);
  // The server maps the object read-write: a client may only hand it memory the server's own
  // user owns, never another user's that the server's privileges happen to reach.
  KILN_CHECK_ARG(st.st_uid == ::geteuid(),
                 "failed to register shared memory region '{}': invalid args ('{}' is owned by "
                 "uid {}, not by the server's uid {}; the server maps only its own user's "
                 "shared memory)",
                 name, key, st.st_uid, ::geteuid());
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  KILN_CHECK_ARG(offset <= size && byte_size <= size - offset,
                 "failed to register shared memory region '{}': invalid args (offset {} + "
                 "byte_size {} is past the end of '{}', {} bytes)",
                 name, offset, byte_size, key, size);

  const uint64_t length = byte_size;
  const uint64_t mapped = mapped_bytes_->load();
  KILN_CHECK(length <= limits_.max_mapped_bytes && mapped <= limits_.max_mapped_bytes - length,
             ErrorCode::Unavailable,
             "failed to register shared memory region '{}': mapping {} more bytes would exceed "
             "the {} bytes of shared memory this server maps (--shared-memory-max-bytes; {} in "
             "use)",
             name, length, limits_.max_mapped_bytes, mapped);
  // The region keeps the descriptor (the registration's own is closed by `closer`).
  const int kept = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  KILN_CHECK(kept >= 0, ErrorCode::Unavailable,
             "failed to register shared memory region '{}': no descriptor left ({})", name,
             std::strerror(errno));
  mapped_bytes_->fetch_add(length);
  regions_.emplace(name, std::make_shared<SystemSharedMemoryRegion>(
                             SharedMemoryRegionStatus{name, key, offset, byte_size}, kept,
                             static_cast<size_t>(length), mapped_bytes_));
}

void SharedMemoryRegistry::register_cuda_region(const std::string& name,
                                                std::span<const std::byte> raw_handle,
                                                int64_t device_id, uint64_t byte_size) {
  check_region_name(name, limits_.max_name_bytes);
  KILN_CHECK_ARG(raw_handle.size() == kCudaIpcHandleBytes,
                 "failed to register CUDA shared memory region '{}': invalid args (the raw "
                 "handle is {} bytes; a cudaIpcMemHandle_t is {})",
                 name, raw_handle.size(), kCudaIpcHandleBytes);
  KILN_CHECK_ARG(byte_size > 0,
                 "failed to register CUDA shared memory region '{}': invalid args (byte_size "
                 "must be above 0)",
                 name);
  KILN_CHECK_ARG(device_id >= 0 && device_id <= kMaxCudaDeviceId,
                 "failed to register CUDA shared memory region '{}': invalid args (device_id {} "
                 "is not a GPU index from 0 to {})",
                 name, device_id, kMaxCudaDeviceId);
  // The name and the count are checked before a GPU is asked, and again when the region is
  // kept: the opening runs outside the lock (the first one loads the GPU library, seconds),
  // so inference keeps finding its regions meanwhile.
  auto check_room = [&] {
    KILN_CHECK_ARG(!regions_.count(name), "shared memory region '{}' already in manager", name);
    KILN_CHECK(regions_.size() < limits_.max_regions, ErrorCode::Unavailable,
               "failed to register CUDA shared memory region '{}': {} regions are registered, "
               "the most this server takes (--shared-memory-max-regions)",
               name, regions_.size());
  };
  {
    std::lock_guard lock(mutex_);
    check_room();
  }
  std::unique_ptr<DeviceSharedMemory> memory;
  try {
    memory = open_device_(raw_handle, device_id, byte_size);
  } catch (const Error& e) {
    fail(ErrorCode::InvalidArgument, "failed to register CUDA shared memory region '{}': {}", name,
         e.message());
  }
  KILN_CHECK(memory, ErrorCode::Internal,
             "failed to register CUDA shared memory region '{}': the device memory did not open",
             name);
  SharedMemoryRegionStatus status{name, {}, 0, byte_size, SharedMemoryKind::Cuda, device_id};
  auto region = std::make_shared<CudaSharedMemoryRegion>(std::move(status), std::move(memory));
  std::lock_guard lock(mutex_);
  check_room();  // on failure `region` closes the memory again
  regions_.emplace(name, std::move(region));
}

void SharedMemoryRegistry::unregister(std::string_view name, SharedMemoryKind kind) {
  std::shared_ptr<SharedMemoryRegion> last;  // closed outside the lock when no request holds it
  std::lock_guard lock(mutex_);
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second->kind() != kind) return;
  last = std::move(it->second);
  regions_.erase(it);
}

void SharedMemoryRegistry::unregister_all(SharedMemoryKind kind) {
  std::vector<std::shared_ptr<SharedMemoryRegion>> gone;  // closed outside the lock
  std::lock_guard lock(mutex_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->second->kind() == kind) {
      gone.push_back(std::move(it->second));
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<SharedMemoryRegionStatus> SharedMemoryRegistry::status(std::string_view name,
                                                                   SharedMemoryKind kind) const {
  const bool cuda = kind == SharedMemoryKind::Cuda;
  std::lock_guard lock(mutex_);
  std::vector<SharedMemoryRegionStatus> out;
  if (name.empty()) {
    for (const auto& [n, region] : regions_) {
      if (region->kind() == kind) out.push_back(region->status());
    }
    return out;
  }
  auto it = regions_.find(name);
  KILN_CHECK(it != regions_.end(), ErrorCode::NotFound,
             "Unable to find {} shared memory region: '{}'", cuda ? "cuda" : "system", name);
  // tritonserver's words for a name of the other kind.
  KILN_CHECK(it->second->kind() == kind, ErrorCode::NotFound,
             "The region named '{}' is registered as {} shared memory, not {} shared memory", name,
             cuda ? "system" : "CUDA", cuda ? "CUDA" : "system");
  out.push_back(it->second->status());
  return out;
}

std::shared_ptr<SharedMemoryRegion> SharedMemoryRegistry::get(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(name);
  KILN_CHECK(it != regions_.end(), ErrorCode::NotFound, "Unable to find shared memory region: '{}'",
             name);
  return it->second;
}

}  // namespace kiln::server
