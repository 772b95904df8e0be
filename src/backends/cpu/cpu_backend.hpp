#pragma once
// The CPU backend: host memory, an in-order stream that runs work as it is queued, and the fast
// kernels of the table registered for backend "cpu" (oneDNN for convolution, matrix products,
// pooling, element-wise ops; Kiln's own loops where oneDNN is slow on plain layouts). Kernels
// parallelize through OpenMP, the runtime oneDNN itself is built on, so both share one pool.
#include "backends/backend.hpp"

namespace kiln::backends {

inline constexpr const char* kCpuBackendName = "cpu";

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return kCpuBackendName; }
  DeviceKind device_kind() const override { return DeviceKind::Cpu; }
  DeviceBuffer allocate(size_t bytes) override;
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  void copy_to_device(void* device_dst, const void* host_src, size_t bytes,
                      Stream& stream) override;
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes, Stream& stream) override;
  Support supports(const ir::Node& node) const override;
  std::unique_ptr<Kernel> create_kernel(const ir::Node& node,
                                        std::string_view kernel_name) override;
  void set_threads(int threads) override;
  Layout activation_layout() const override;
  std::string cannot_compute(DataType type) const override;

  // The process-wide instance (the CPU has no per-session state worth duplicating).
  static CpuBackend& instance();
};

// Threads an OpenMP parallel region of this thread will use (for Kiln's own kernels).
int cpu_threads();

}  // namespace kiln::backends
