// The GPU backend on a real device: memory, copies of many sizes (direct from pinned memory and
// staged from pageable), stream order, events, two streams joined by wait(), errors that leave
// the backend usable. Skips, saying why, where no GPU can be opened; gpu_loader_test checks
// those reasons.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/gpu/loader.hpp"
#include "core/error.hpp"
#include "gpu_test_env.hpp"
#include "ir/graph.hpp"

namespace kiln::backends {
namespace {

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

class GpuBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    GpuProbe probe = probe_gpu_backend();
    gpu_ = probe.backend.release();
    reason_ = probe.reason;
  }
  static void TearDownTestSuite() {
    delete gpu_;
    gpu_ = nullptr;
  }
  void SetUp() override {
    if (!gpu_) {
      // Where the machine has a GPU, not opening it is a failure, not a skip.
      if (gpu_test::gpu_present() && !gpu_test::built_libraries().empty())
        FAIL() << "a GPU is present but the backend did not open: " << reason_;
      GTEST_SKIP() << "no GPU: " << reason_;
    }
  }
  static GpuBackend* gpu_;
  static std::string reason_;
};
GpuBackend* GpuBackendTest::gpu_ = nullptr;
std::string GpuBackendTest::reason_;

TEST_F(GpuBackendTest, DescribesItsDevice) {
  const GpuDeviceInfo& info = gpu_->device_info();
  EXPECT_EQ(gpu_->device_kind(), DeviceKind::Gpu);
  EXPECT_EQ(std::string(gpu_->name()), info.target.vendor + ":" + info.target.arch);
  EXPECT_EQ(parse_gpu_target(info.target.to_string()), info.target);
  EXPECT_TRUE(info.wavefront_size == 32 || info.wavefront_size == 64) << info.wavefront_size;
  EXPECT_EQ(info.wavefront_size, default_wavefront_size(info.target));
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory, uint64_t{1} << 30);
  EXPECT_LE(info.free_memory, info.total_memory);
  EXPECT_GE(info.device_count, 1);
  EXPECT_EQ(info.matrix_instructions, matrix_instructions(info.target));
  EXPECT_FALSE(info.runtime_version.empty());
  EXPECT_FALSE(info.driver_version.empty());
  EXPECT_FALSE(info.compiled_archs.empty());
  EXPECT_FALSE(info.name.empty());
  std::cout << "[ device   ] " << info.name << "\n" << describe_gpu_device(info);
}

TEST_F(GpuBackendTest, RoundTripsManySizesPageableAndPinned) {
  // Around the staging chunk (4 MiB) and several chunks past it.
  const size_t chunk = size_t{4} << 20;
  for (size_t n : {size_t{1}, size_t{3}, size_t{4096}, chunk - 1, chunk, chunk + 1, 3 * chunk + 5,
                   size_t{64} << 20}) {
    SCOPED_TRACE(n);
    std::vector<uint8_t> src = pattern(n, static_cast<uint32_t>(n));
    DeviceBuffer d = gpu_->allocate(n);
    ASSERT_TRUE(d);
    ASSERT_GE(d.size(), n);
    Stream& s = gpu_->compute_stream();
    std::vector<uint8_t> back(n, 0);
    gpu_->copy_to_device(d.data(), src.data(), n, s);
    gpu_->copy_to_host(back.data(), d.data(), n, s);
    s.synchronize();
    ASSERT_EQ(back, src);

    DeviceBuffer pinned_in = gpu_->allocate_pinned(n), pinned_out = gpu_->allocate_pinned(n);
    std::vector<uint8_t> other = pattern(n, static_cast<uint32_t>(n) + 7);
    std::memcpy(pinned_in.data(), other.data(), n);
    std::memset(pinned_out.data(), 0, n);
    gpu_->copy_to_device(d.data(), pinned_in.data(), n, gpu_->copy_stream());
    gpu_->copy_to_host(pinned_out.data(), d.data(), n, gpu_->copy_stream());
    gpu_->copy_stream().synchronize();
    ASSERT_EQ(std::memcmp(pinned_out.data(), other.data(), n), 0);
  }
}

TEST_F(GpuBackendTest, ZeroBytesIsANoOp) {
  DeviceBuffer d = gpu_->allocate(0);
  EXPECT_TRUE(d);
  Stream& s = gpu_->compute_stream();
  gpu_->copy_to_device(d.data(), nullptr, 0, s);
  gpu_->copy_to_host(nullptr, d.data(), 0, s);
  s.synchronize();
}

TEST_F(GpuBackendTest, OneStreamRunsInOrder) {
  const size_t n = size_t{32} << 20;
  std::vector<uint8_t> first = pattern(n, 1);
  DeviceBuffer a = gpu_->allocate(n), b = gpu_->allocate(n);
  std::unique_ptr<Stream> s = gpu_->create_stream();
  // Each step reads what the one before wrote: any reordering changes what comes back.
  gpu_->copy_to_device(a.data(), first.data(), n, *s);
  gpu_->copy_device_to_device(b.data(), a.data(), n, *s);
  gpu_->fill_device(a.data(), 0xAB, n, *s);
  std::vector<uint8_t> got_b(n), got_a(n);
  gpu_->copy_to_host(got_b.data(), b.data(), n, *s);
  gpu_->copy_to_host(got_a.data(), a.data(), n, *s);
  std::atomic<int> host_calls{0};
  uint8_t seen = 0;
  DeviceBuffer pinned = gpu_->allocate_pinned(n);
  gpu_->copy_to_host(pinned.data(), b.data(), n, *s);
  // A host function sees the copy queued before it complete.
  s->enqueue([&] {
    seen = static_cast<uint8_t*>(pinned.data())[n - 1];
    host_calls++;
  });
  s->synchronize();
  EXPECT_EQ(got_b, first);
  EXPECT_EQ(got_a, std::vector<uint8_t>(n, 0xAB));
  EXPECT_EQ(host_calls.load(), 1);
  EXPECT_EQ(seen, first[n - 1]);
}

TEST_F(GpuBackendTest, HostFunctionErrorsComeBackAtSynchronize) {
  std::unique_ptr<Stream> s = gpu_->create_stream();
  s->enqueue([] { fail(ErrorCode::Internal, "planted failure in a host function"); });
  expect_error([&] { s->synchronize(); }, ErrorCode::Internal, "planted failure");
  s->synchronize();  // reported once; the stream goes on
}

TEST_F(GpuBackendTest, EventsTimeDeviceWork) {
  const size_t n = size_t{256} << 20;
  DeviceBuffer a = gpu_->allocate(n), b = gpu_->allocate(n);
  Stream& s = gpu_->compute_stream();
  auto start = gpu_->create_event(), stop = gpu_->create_event();
  start->record(s);
  for (int i = 0; i < 4; ++i) gpu_->copy_device_to_device(b.data(), a.data(), n, s);
  stop->record(s);
  stop->synchronize();
  double ms = stop->elapsed_ms(*start);
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, 10000.0);
  auto unrecorded = gpu_->create_event();
  expect_error([&] { unrecorded->elapsed_ms(*start); }, ErrorCode::InvalidArgument,
               "not both recorded");
}

TEST_F(GpuBackendTest, SecondStreamWaitsForTheFirst) {
  // A 256 MiB upload takes milliseconds; the second stream's copy of its destination must
  // see all of it, which only wait() guarantees (the streams are non-blocking).
  const size_t n = size_t{256} << 20;
  DeviceBuffer pinned = gpu_->allocate_pinned(n), out = gpu_->allocate_pinned(n);
  std::vector<uint8_t> data = pattern(n, 42);
  std::memcpy(pinned.data(), data.data(), n);
  DeviceBuffer x = gpu_->allocate(n), y = gpu_->allocate(n);
  Stream& upload = gpu_->copy_stream();
  std::unique_ptr<Stream> work = gpu_->create_stream();
  gpu_->fill_device(x.data(), 0, n, upload);
  upload.synchronize();
  auto uploaded = gpu_->create_event();
  gpu_->copy_to_device(x.data(), pinned.data(), n, upload);
  uploaded->record(upload);
  work->wait(*uploaded);
  gpu_->copy_device_to_device(y.data(), x.data(), n, *work);
  gpu_->copy_to_host(out.data(), y.data(), n, *work);
  work->synchronize();
  EXPECT_EQ(std::memcmp(out.data(), data.data(), n), 0);
}

TEST_F(GpuBackendTest, AbsurdAllocationsFailCleanly) {
  expect_error([&] { gpu_->allocate(size_t{1} << 60); }, ErrorCode::Unavailable,
               "out of GPU memory: 1152921504606846976 bytes requested");
  expect_error([&] { gpu_->allocate_pinned(size_t{1} << 60); }, ErrorCode::Unavailable,
               "pinned host memory");
  // The backend is healthy afterwards.
  DeviceBuffer d = gpu_->allocate(1024);
  std::vector<uint8_t> src = pattern(1024, 5), back(1024);
  gpu_->copy_to_device(d.data(), src.data(), 1024, gpu_->compute_stream());
  gpu_->copy_to_host(back.data(), d.data(), 1024, gpu_->compute_stream());
  gpu_->compute_stream().synchronize();
  EXPECT_EQ(back, src);
}

TEST_F(GpuBackendTest, RefusesStreamsOfOtherBackends) {
  struct ForeignStream : Stream {
    void enqueue(std::function<void()> fn) override { fn(); }
    void wait(const Event&) override {}
    void synchronize() override {}
  } foreign;
  DeviceBuffer d = gpu_->allocate(16);
  uint8_t host[16] = {};
  expect_error([&] { gpu_->copy_to_device(d.data(), host, 16, foreign); },
               ErrorCode::InvalidArgument, "a stream of another backend");
  auto e = gpu_->create_event();
  expect_error([&] { e->record(foreign); }, ErrorCode::InvalidArgument,
               "a stream of another backend");
}

TEST_F(GpuBackendTest, HasNoKernelsYetAndSaysSo) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", {});
  ir::Value* y = g.add_value("y");
  ir::Node* relu = g.add_node("Relu", "", "relu0", {x}, {y});
  Support s = gpu_->supports(*relu);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.reason.find("no kernel for Relu"), std::string::npos) << s.reason;
  expect_error([&] { gpu_->create_kernel(*relu, "gpu.relu"); }, ErrorCode::Unsupported,
               "no kernel 'gpu.relu' (node relu0 of type Relu)");
}

}  // namespace
}  // namespace kiln::backends
