// The system shared memory registry (server/shared_memory.hpp) on objects this test makes:
// bounds (overflow-safe), names, keys, limits, and a region that outlives its unregistering while
// a holder keeps it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
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
