// The shared memory registry (server/shared_memory.hpp) on objects this test makes: bounds
// (overflow-safe), names, keys, limits, and a region that outlives its unregistering while a
// holder keeps it; CUDA regions through a fake device (host memory standing for the GPU's):
// one name space with system regions, the checks made before any device is asked, the device's
// refusal in tritonserver's words, and a device memory closed only when its last holder lets go.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "expect_error.hpp"
#include "server/shared_memory.hpp"

using namespace kiln;
using namespace kiln::server;

namespace {

// A POSIX shm object of `size` bytes, unlinked at the end of the test.
struct ShmObject {
  std::string key;
  explicit ShmObject(const std::string& name, size_t size)
      : key("/kiln_unit_" + std::to_string(getpid()) + "_" + name) {
    const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    close(fd);
  }
  ~ShmObject() { shm_unlink(key.c_str()); }
};

}  // namespace

TEST(ServerSharedMemory, RegisterStatusUnregister) {
  ShmObject obj("basic", 8192);
  SharedMemoryRegistry registry;
  registry.register_region("r", obj.key, 4100, 16);  // an offset that is not page aligned
  std::vector<SharedMemoryRegionStatus> all = registry.status();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key, obj.key);
  EXPECT_EQ(all[0].offset, 4100u);
  EXPECT_EQ(all[0].byte_size, 16u);
  expect_error([&] { registry.register_region("r", obj.key, 0, 8); }, ErrorCode::InvalidArgument,
               "shared memory region 'r' already in manager");
  std::shared_ptr<SharedMemoryRegion> held = registry.get("r");
  std::vector<std::byte> sevens(16, std::byte{7});
  held->write(0, sevens);
  registry.unregister("r");
  registry.unregister("never");  // no error, as Triton
  expect_error([&] { registry.status("r"); }, ErrorCode::NotFound,
               "Unable to find system shared memory region: 'r'");
  expect_error([&] { registry.get("r"); }, ErrorCode::NotFound,
               "Unable to find shared memory region: 'r'");
  // Still open for its holder, and counted until it lets go.
  std::byte last{};
  held->read(15, {&last, 1});
  EXPECT_EQ(static_cast<int>(last), 7);
  EXPECT_GT(registry.mapped_bytes(), 0u);
  held.reset();
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

TEST(ServerSharedMemory, RangesAreOverflowSafe) {
  ShmObject obj("ranges", 4096);
  SharedMemoryRegistry registry;
  registry.register_region("r", obj.key, 0, 64);
  std::shared_ptr<SharedMemoryRegion> r = registry.get("r");
  r->check_range(60, 4);
  expect_error([&] { r->check_range(64, 0); }, ErrorCode::InvalidArgument,
               "Invalid offset for shared memory region: 'r'");
  expect_error([&] { r->check_range(8, UINT64_MAX); }, ErrorCode::InvalidArgument,
               "Invalid offset + byte size for shared memory region: 'r'");
  expect_error([&] { registry.register_region("x", obj.key, UINT64_MAX, 2); },
               ErrorCode::InvalidArgument,
               "failed to register shared memory region 'x': invalid args");
  expect_error([&] { registry.register_region("x", obj.key, 4000, 97); },
               ErrorCode::InvalidArgument,
               "failed to register shared memory region 'x': invalid args");
  expect_error([&] { registry.register_region("x", obj.key, 0, 0); }, ErrorCode::InvalidArgument,
               "byte_size must be above 0");
}

TEST(ServerSharedMemory, NamesAndKeys) {
  ShmObject obj("names", 4096);
  SharedMemoryRegistry registry;
  for (const char* bad : {"", "a b", "a/b", "\n"}) {
    expect_error([&] { registry.register_region(bad, obj.key, 0, 8); }, ErrorCode::InvalidArgument,
                 "invalid shared memory region name");
  }
  expect_error([&] { registry.register_region(std::string(257, 'n'), obj.key, 0, 8); },
               ErrorCode::InvalidArgument, "invalid shared memory region name");
  for (const char* bad : {"", "/", "/a/b", "/..", "../x"}) {
    expect_error([&] { registry.register_region("k", bad, 0, 8); }, ErrorCode::InvalidArgument,
                 "is not a POSIX shared memory name");
  }
  expect_error([&] { registry.register_region("k", obj.key + "_missing", 0, 8); },
               ErrorCode::Internal, "Unable to open shared memory region");
  EXPECT_TRUE(registry.status().empty());
}

TEST(ServerSharedMemory, Limits) {
  ShmObject obj("limits", 65536);
  SharedMemoryLimits limits;
  limits.max_regions = 2;
  limits.max_mapped_bytes = 16384;
  SharedMemoryRegistry registry(limits);
  registry.register_region("a", obj.key, 0, 4096);
  registry.register_region("b", obj.key, 4096, 4096);
  expect_error([&] { registry.register_region("c", obj.key, 0, 8); }, ErrorCode::Unavailable,
               "2 regions are registered");
  registry.unregister("a");
  expect_error([&] { registry.register_region("c", obj.key, 0, 16384); }, ErrorCode::Unavailable,
               "--shared-memory-max-bytes");
  registry.register_region("c", obj.key, 0, 8192);
  registry.unregister_all();
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

// A client may shrink its object after registering it: the server's reads and writes are then
// refused (through the descriptor), never a fault in the server.
TEST(ServerSharedMemory, AShrunkObjectIsRefusedNotAFault) {
  ShmObject obj("shrunk", 8192);
  SharedMemoryRegistry registry;
  registry.register_region("r", obj.key, 4096, 4096);
  std::shared_ptr<SharedMemoryRegion> r = registry.get("r");
  std::vector<std::byte> buf(4096);
  r->read(0, buf);
  const int fd = shm_open(obj.key.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100), 0);
  expect_error([&] { r->read(0, buf); }, ErrorCode::InvalidArgument, "was it shrunk");
  expect_error([&] { r->write(0, buf); }, ErrorCode::InvalidArgument, "was it shrunk");
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 100);  // the refused write did not grow it
  close(fd);
}

namespace {

// Host memory standing for a GPU's: handles are 64 bytes whose first byte names a buffer of
// `buffers`; a handle starting with 0xff does not open.
struct FakeDevice {
  std::map<int, std::vector<std::byte>> buffers;
  int opened = 0, closed = 0, open_calls = 0;

  struct Memory final : DeviceSharedMemory {
    FakeDevice& device;
    std::vector<std::byte>& bytes;
    Memory(FakeDevice& d, std::vector<std::byte>& b) : device(d), bytes(b) { ++device.opened; }
    ~Memory() override { ++device.closed; }
    void copy_to_host(uint64_t offset, std::span<std::byte> to) override {
      std::memcpy(to.data(), bytes.data() + offset, to.size());
    }
    void copy_from_host(uint64_t offset, std::span<const std::byte> from) override {
      std::memcpy(bytes.data() + offset, from.data(), from.size());
    }
  };

  DeviceSharedMemoryOpener opener() {
    return [this](std::span<const std::byte> handle, int64_t device_id,
                  uint64_t byte_size) -> std::unique_ptr<DeviceSharedMemory> {
      ++open_calls;
      KILN_CHECK_ARG(handle.size() == 64, "fake: handle of {} bytes", handle.size());
      KILN_CHECK_ARG(handle[0] != std::byte{0xff},
                     "failed to open CUDA IPC handle: invalid argument");
      KILN_CHECK_ARG(device_id == 0, "no GPU {}", device_id);
      std::vector<std::byte>& b = buffers.at(static_cast<int>(handle[0]));
      KILN_CHECK_ARG(byte_size <= b.size(), "byte_size {} is past the end", byte_size);
      return std::make_unique<Memory>(*this, b);
    };
  }
};

std::vector<std::byte> handle(int buffer) {
  std::vector<std::byte> h(64, std::byte{0});
  h[0] = static_cast<std::byte>(buffer);
  return h;
}

}  // namespace

TEST(ServerSharedMemory, CudaRegionsRegisterReadWriteUnregister) {
  FakeDevice gpu;
  gpu.buffers[1].assign(64, std::byte{0});
  SharedMemoryRegistry registry({}, gpu.opener());
  registry.register_cuda_region("c", handle(1), 0, 32);
  std::vector<SharedMemoryRegionStatus> cuda = registry.status({}, SharedMemoryKind::Cuda);
  ASSERT_EQ(cuda.size(), 1u);
  EXPECT_EQ(cuda[0].name, "c");
  EXPECT_EQ(cuda[0].device_id, 0);
  EXPECT_EQ(cuda[0].byte_size, 32u);
  EXPECT_TRUE(registry.status().empty());  // system regions only
  expect_error([&] { registry.status("c"); }, ErrorCode::NotFound,
               "The region named 'c' is registered as CUDA shared memory, not system shared "
               "memory");
  expect_error([&] { registry.status("x", SharedMemoryKind::Cuda); }, ErrorCode::NotFound,
               "Unable to find cuda shared memory region: 'x'");
  std::shared_ptr<SharedMemoryRegion> held = registry.get("c");
  std::vector<std::byte> nines(8, std::byte{9});
  held->write(24, nines);
  EXPECT_EQ(static_cast<int>(gpu.buffers[1][31]), 9);
  EXPECT_EQ(static_cast<int>(gpu.buffers[1][32]), 0);  // past the region: untouched
  std::byte b{};
  held->read(31, {&b, 1});
  EXPECT_EQ(static_cast<int>(b), 9);
  expect_error([&] { held->write(28, nines); }, ErrorCode::InvalidArgument,
               "Invalid offset + byte size for shared memory region: 'c'");
  expect_error(
      [&] {
        held->read(32, {&b, 1});
      },
      ErrorCode::InvalidArgument, "Invalid offset for shared memory region: 'c'");
  expect_error([&] { held->check_range(1, UINT64_MAX); }, ErrorCode::InvalidArgument,
               "Invalid offset + byte size");
  // Unregistering a system region of that name, or an unknown one, leaves it (tritonserver).
  registry.unregister("c");
  registry.unregister_all();
  registry.unregister("never", SharedMemoryKind::Cuda);
  EXPECT_EQ(registry.status({}, SharedMemoryKind::Cuda).size(), 1u);
  registry.unregister("c", SharedMemoryKind::Cuda);
  EXPECT_TRUE(registry.status({}, SharedMemoryKind::Cuda).empty());
  // Still open for the request holding it; closed when it lets go.
  EXPECT_EQ(gpu.closed, 0);
  held->read(31, {&b, 1});
  held.reset();
  EXPECT_EQ(gpu.closed, 1);
}

TEST(ServerSharedMemory, CudaRegionsAreCheckedBeforeTheDevice) {
  FakeDevice gpu;
  gpu.buffers[1].assign(64, std::byte{0});
  SharedMemoryLimits limits;
  limits.max_regions = 2;
  SharedMemoryRegistry registry(limits, gpu.opener());
  expect_error([&] { registry.register_cuda_region("a b", handle(1), 0, 8); },
               ErrorCode::InvalidArgument, "invalid shared memory region name");
  std::vector<std::byte> short_handle(63);
  expect_error([&] { registry.register_cuda_region("c", short_handle, 0, 8); },
               ErrorCode::InvalidArgument,
               "failed to register CUDA shared memory region 'c': invalid args (the raw handle "
               "is 63 bytes; a cudaIpcMemHandle_t is 64)");
  expect_error([&] { registry.register_cuda_region("c", handle(1), 0, 0); },
               ErrorCode::InvalidArgument, "byte_size must be above 0");
  for (int64_t bad : {int64_t{-1}, kMaxCudaDeviceId + 1, INT64_MAX}) {
    expect_error([&] { registry.register_cuda_region("c", handle(1), bad, 8); },
                 ErrorCode::InvalidArgument, "is not a GPU index from 0 to 255");
  }
  EXPECT_EQ(gpu.open_calls, 0);
  // The device's refusals, in tritonserver's words with its reason.
  expect_error([&] { registry.register_cuda_region("c", handle(0xff), 0, 8); },
               ErrorCode::InvalidArgument,
               "failed to register CUDA shared memory region 'c': failed to open CUDA IPC "
               "handle: invalid argument");
  expect_error([&] { registry.register_cuda_region("c", handle(1), 0, 65); },
               ErrorCode::InvalidArgument, "byte_size 65 is past the end");
  expect_error([&] { registry.register_cuda_region("c", handle(1), 3, 8); },
               ErrorCode::InvalidArgument, "no GPU 3");
  EXPECT_TRUE(registry.status({}, SharedMemoryKind::Cuda).empty());
  // One name space and one limit with system regions.
  ShmObject obj("cuda_names", 4096);
  registry.register_region("s", obj.key, 0, 8);
  const int calls = gpu.open_calls;
  expect_error([&] { registry.register_cuda_region("s", handle(1), 0, 8); },
               ErrorCode::InvalidArgument, "shared memory region 's' already in manager");
  EXPECT_EQ(gpu.open_calls, calls);  // refused before the device was asked
  registry.register_cuda_region("c", handle(1), 0, 8);
  expect_error([&] { registry.register_region("c", obj.key, 0, 8); }, ErrorCode::InvalidArgument,
               "shared memory region 'c' already in manager");
  expect_error([&] { registry.register_cuda_region("d", handle(1), 0, 8); }, ErrorCode::Unavailable,
               "2 regions are registered");
  expect_error([&] { registry.status("s", SharedMemoryKind::Cuda); }, ErrorCode::NotFound,
               "The region named 's' is registered as system shared memory, not CUDA shared "
               "memory");
  registry.unregister_all(SharedMemoryKind::Cuda);
  EXPECT_EQ(registry.status().size(), 1u);  // the system region stays
  EXPECT_EQ(gpu.opened, gpu.closed);
}
