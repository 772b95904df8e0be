#pragma once
// The GPU backend over the HIP runtime API (CUDA's through vendor.hpp on NVIDIA).
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu/gpu_backend.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/pinned_memory.hpp"

namespace kiln::backends::gpu {

// The kernel table's backend key of every GPU kernel (KernelDef::backend): one table for any
// device, whose kernels' checks look at the device (GpuBackendImpl::device_info()).
inline constexpr const char* kGpuKernelTable = "gpu";

class GpuBackendImpl final : public GpuBackend {
 public:
  // Opens device `index` (hipSetDevice) and creates its two streams.
  explicit GpuBackendImpl(int index);

  std::string_view name() const override { return name_; }
  DeviceKind device_kind() const override { return DeviceKind::Gpu; }

  DeviceBuffer allocate(size_t bytes) override;
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  void copy_to_device(void* device_dst, const void* host_src, size_t bytes,
                      Stream& stream) override;
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes, Stream& stream) override;
  // A kernel's constant data (weights, bias) in a buffer of its own, copied now and waited for:
  // what kernels do when they are created, never inside a run.
  DeviceBuffer upload(const void* host, size_t bytes);

  // Channels-last: what cuDNN's tensor-core convolutions exchange (the plan keeps a 4-D value
  // so where its producer and readers on this device all take it).
  Layout activation_layout() const override { return Layout::channels_last(); }
  Support supports(const ir::Node& node) const override;
  std::unique_ptr<Kernel> create_kernel(const ir::Node& node,
                                        std::string_view kernel_name) override;
  std::vector<size_t> in_place_inputs(const ir::Node& node,
                                      std::string_view kernel_name) const override;

  // Starts from KILN_GPU_OWN_KERNELS (unset or 0: Default, 1: Own, only: OwnOnly).
  void set_kernel_preference(KernelPreference preference) override { preference_ = preference; }
  KernelPreference kernel_preference() const override { return preference_; }

  const GpuDeviceInfo& device_info() const override { return info_; }
  // "cudnn 9.14.0", "cublasLt 13.1.0": what the kernels' timed choices depend on (a library
  // that is missing is not listed; its kernels are not chosen).
  std::vector<std::string> library_versions() const override {
    std::vector<std::string> out;
    for (const GpuLibraryVersion& l : info_.libraries) {
      if (l.missing.empty()) out.push_back(l.name + " " + l.version);
    }
    return out;
  }
  Stream& compute_stream() override { return *compute_; }
  Stream& copy_stream() override { return *copy_; }
  DeviceBuffer allocate_pinned(size_t bytes) override;
  DeviceBuffer allocate_host(size_t bytes) override { return allocate_pinned(bytes); }
  void copy_device_to_device(void* device_dst, const void* device_src, size_t bytes,
                             Stream& stream) override;
  void fill_device(void* device_dst, uint8_t value, size_t bytes, Stream& stream) override;
  // ipc_memory.cpp
  void* open_ipc_memory(const void* handle, size_t handle_bytes, uint64_t* bytes_to_end) override;
  void close_ipc_memory(void* device_ptr) override;

 private:
  GpuStream& own_stream(Stream& stream) const;

  int device_;
  GpuDeviceInfo info_;
  std::string name_;  // "cuda:sm_90": vendor and arch, without AMD's features
  KernelPreference preference_ = KernelPreference::Default;
  std::shared_ptr<PinnedRegistry> pinned_ = std::make_shared<PinnedRegistry>();
  std::unique_ptr<PinnedStaging> staging_;
  std::unique_ptr<GpuStream> compute_, copy_;
};

}  // namespace kiln::backends::gpu
