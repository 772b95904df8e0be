#include "backends/cpu/cpu_backend.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/cpu/onednn_common.hpp"
#include "backends/kernel_table.hpp"
#include "core/tensor.hpp"

namespace kiln::backends {
namespace {

class CpuEvent final : public Event {
 public:
  // The CPU stream runs work as it is queued, so everything before record() is done by then.
  void record(Stream&) override { at_ = std::chrono::steady_clock::now(); }
  void synchronize() override {}
  double elapsed_ms(const Event& start) const override {
    const auto& s = dynamic_cast<const CpuEvent&>(start);
    return std::chrono::duration<double, std::milli>(at_ - s.at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
};

}  // namespace

CpuBackend& CpuBackend::instance() {
  static CpuBackend backend;
  return backend;
}

DeviceBuffer CpuBackend::allocate(size_t bytes) {
  size_t rounded =
      (std::max<size_t>(bytes, 1) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  KILN_CHECK(p, ErrorCode::Unavailable, "out of memory allocating {} bytes", bytes);
  return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
}

std::unique_ptr<Stream> CpuBackend::create_stream() {
  return std::make_unique<cpu::CpuStream>();
}

std::unique_ptr<Event> CpuBackend::create_event() {
  return std::make_unique<CpuEvent>();
}

void CpuBackend::copy_to_device(void* device_dst, const void* host_src, size_t bytes, Stream&) {
  if (bytes) std::memcpy(device_dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* device_src, size_t bytes, Stream&) {
  if (bytes) std::memcpy(host_dst, device_src, bytes);
}

Support CpuBackend::supports(const ir::Node& node) const {
  return KernelTable::instance().select(*this, node);
}

std::unique_ptr<Kernel> CpuBackend::create_kernel(const ir::Node& node,
                                                  std::string_view kernel_name) {
  return KernelTable::instance().create(*this, node, kernel_name);
}

void CpuBackend::set_threads(int threads) {
#ifdef _OPENMP
  // Per calling thread (an OpenMP ICV): oneDNN and Kiln's loops both read it.
  omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
#else
  (void)threads;
#endif
}

Layout CpuBackend::activation_layout() const {
  // KILN_CPU_BLOCKED=0 keeps every activation row-major (for comparisons).
  static const bool off = [] {
    const char* e = std::getenv("KILN_CPU_BLOCKED");
    return e && std::string_view(e) == "0";
  }();
  const int block = cpu::cpu_channel_block();
  return off || block <= 0 ? Layout::row_major() : Layout::channel_blocked(block);
}

std::string CpuBackend::cannot_compute(DataType type) const {
  if (type == DataType::BFloat16 && !cpu::cpu_has_bf16()) {
    return "this CPU has no bfloat16 instructions (AVX512_BF16 or AMX): oneDNN would emulate "
           "them, slower than float32";
  }
  return {};
}

int cpu_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace kiln::backends
