// The GPU backend on a real device: memory, copies of many sizes (direct from pinned memory and
// staged from pageable), stream order, events, two streams joined by wait(), errors that leave
// the backend usable, the element-wise kernels against the host. Skips, saying why, where no GPU
// can be opened; gpu_loader_test checks those reasons.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backends/gpu/loader.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
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

// Device tensors for a kernel's outputs, owned by the test.
class TestOutputs : public KernelOutputs {
 public:
  explicit TestOutputs(GpuBackend& gpu) : gpu_(gpu) {}
  DeviceTensor allocate(size_t index, DataType dtype, std::vector<int64_t> dims) override {
    DeviceTensor t{dtype, std::move(dims), nullptr, Layout::row_major()};
    buffers_.push_back(gpu_.allocate(t.nbytes()));
    t.data = buffers_.back().data();
    if (index >= tensors_.size()) tensors_.resize(index + 1);
    tensors_[index] = t;
    return t;
  }
  const DeviceTensor& at(size_t i) const { return tensors_.at(i); }

 private:
  GpuBackend& gpu_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<DeviceTensor> tensors_;
};

struct NodeFixture {
  ir::Graph graph;
  ir::Node* node = nullptr;
  NodeFixture(const std::string& op, std::vector<TypeInfo> input_types) {
    std::vector<ir::Value*> inputs;
    for (size_t i = 0; i < input_types.size(); ++i)
      inputs.push_back(graph.add_input("x" + std::to_string(i), input_types[i]));
    node = graph.add_node(op, "", op + "0", inputs, {graph.add_value("y")});
  }
};

// Runs `op` on the GPU over `inputs` (host values of `dtype`, `n` elements each).
template <typename T>
std::vector<T> run_on_gpu(GpuBackend& gpu, const std::string& op, DataType dtype,
                          const std::vector<std::vector<T>>& inputs) {
  int64_t n = static_cast<int64_t>(inputs[0].size());
  std::vector<TypeInfo> types(inputs.size(), TypeInfo::tensor(dtype, Shape::from_values({n})));
  NodeFixture f(op, types);
  Support s = gpu.supports(*f.node);
  EXPECT_TRUE(s.ok()) << s.reason;
  if (!s.ok()) return {};
  std::unique_ptr<Kernel> kernel = gpu.create_kernel(*f.node, s.kernel);
  EXPECT_EQ(kernel->name(), s.kernel);
  // Element-wise: each input may give its memory to the output.
  std::vector<size_t> in_place = gpu.in_place_inputs(*f.node, s.kernel);
  EXPECT_EQ(in_place.size(), inputs.size());
  Stream& stream = gpu.compute_stream();
  std::vector<DeviceBuffer> buffers;
  std::vector<DeviceTensor> tensors;
  for (const auto& v : inputs) {
    buffers.push_back(gpu.allocate(v.size() * sizeof(T)));
    gpu.copy_to_device(buffers.back().data(), v.data(), v.size() * sizeof(T), stream);
    tensors.push_back({dtype, {n}, buffers.back().data(), Layout::row_major()});
  }
  TestOutputs outputs(gpu);
  kernel->run(tensors, outputs, stream);
  std::vector<T> y(static_cast<size_t>(n));
  gpu.copy_to_host(y.data(), outputs.at(0).data, y.size() * sizeof(T), stream);
  stream.synchronize();
  return y;
}

TEST_F(GpuBackendTest, ElementwiseKernelsMatchTheHostFp32) {
  // Past one grid's worth of blocks (65535 x 256), so the grid-stride loop is exercised.
  const size_t n = 65535 * 256 + 1001;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(static_cast<int64_t>(i % 2001) - 1000) * 0.37f;
    b[i] = static_cast<float>((i * 7) % 997 + 1) * 0.11f;
  }
  a[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> relu = run_on_gpu<float>(*gpu_, "Relu", DataType::Float32, {a});
  std::vector<float> add = run_on_gpu<float>(*gpu_, "Add", DataType::Float32, {a, b});
  std::vector<float> sub = run_on_gpu<float>(*gpu_, "Sub", DataType::Float32, {a, b});
  std::vector<float> mul = run_on_gpu<float>(*gpu_, "Mul", DataType::Float32, {a, b});
  std::vector<float> div = run_on_gpu<float>(*gpu_, "Div", DataType::Float32, {a, b});
  std::vector<float> neg = run_on_gpu<float>(*gpu_, "Neg", DataType::Float32, {a});
  std::vector<float> abs = run_on_gpu<float>(*gpu_, "Abs", DataType::Float32, {a});
  ASSERT_EQ(relu.size(), n);
  EXPECT_TRUE(std::isnan(relu[5]));  // NaN stays NaN, as in the reference kernel
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i == 5) continue;
    // One IEEE operation each: bit-exact with the host.
    bad += relu[i] != (a[i] < 0 ? 0.f : a[i]);
    bad += add[i] != a[i] + b[i];
    bad += sub[i] != a[i] - b[i];
    bad += mul[i] != a[i] * b[i];
    bad += div[i] != a[i] / b[i];
    bad += neg[i] != -a[i];
    bad += abs[i] != std::fabs(a[i]);
  }
  EXPECT_EQ(bad, 0u);
}

TEST_F(GpuBackendTest, ElementwiseKernelsMatchTheHostFp16) {
  const size_t n = 100003;
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float_to_half_bits(static_cast<float>(static_cast<int64_t>(i % 301) - 150) * 0.25f);
    b[i] = float_to_half_bits(static_cast<float>(i % 17 + 1) * 0.5f);
  }
  std::vector<uint16_t> add = run_on_gpu<uint16_t>(*gpu_, "Add", DataType::Float16, {a, b});
  std::vector<uint16_t> relu = run_on_gpu<uint16_t>(*gpu_, "Relu", DataType::Float16, {a});
  ASSERT_EQ(add.size(), n);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float fa = half_bits_to_float(a[i]), fb = half_bits_to_float(b[i]);
    // Computed in fp32, rounded once to fp16.
    bad += add[i] != float_to_half_bits(fa + fb);
    bad += relu[i] != float_to_half_bits(fa < 0 ? 0.f : fa);
  }
  EXPECT_EQ(bad, 0u);
}

TEST_F(GpuBackendTest, RefusesNodesItCannotRunAndSaysWhy) {
  auto reason = [&](const std::string& op, std::vector<TypeInfo> types) {
    NodeFixture f(op, std::move(types));
    Support s = gpu_->supports(*f.node);
    EXPECT_FALSE(s.ok()) << op;
    return s.reason;
  };
  auto f32 = [](std::vector<int64_t> d) {
    return TypeInfo::tensor(DataType::Float32, Shape::from_values(d));
  };
  EXPECT_NE(reason("NonMaxSuppression", {f32({1, 8, 4}), f32({1, 1, 8})})
                .find("no GPU kernel for NonMaxSuppression"),
            std::string::npos);
  // Weights computed at run time (not a constant the kernel reorders once).
  EXPECT_NE(reason("Conv", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})}).find("constant 4-D weights"),
            std::string::npos);
  EXPECT_NE(reason("Relu", {TypeInfo::tensor(DataType::Int32, Shape::from_values({4}))})
                .find("takes float32, float16 or bfloat16"),
            std::string::npos);
  EXPECT_NE(reason("Add", {f32({4, 3}), f32({2})}).find("do not broadcast"), std::string::npos);
  std::string r =
      reason("Add", {f32({4}), TypeInfo::tensor(DataType::Float16, Shape::from_values({4}))});
  EXPECT_NE(r.find("the GPU backend (" + std::string(gpu_->name()) + ")"), std::string::npos) << r;

  NodeFixture relu("Relu", {f32({4})});
  expect_error([&] { gpu_->create_kernel(*relu.node, "gpu.conv"); }, ErrorCode::Unsupported,
               "node 'Relu0' (Relu): the " + std::string(gpu_->name()) +
                   " backend has no kernel 'gpu.conv'");
}

}  // namespace
}  // namespace kiln::backends
