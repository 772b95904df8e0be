#include "backends/gpu/runtime/gpu_backend_impl.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "backends/gpu/runtime/device_query.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

std::string gib(uint64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
}

// KILN_GPU_OWN_KERNELS: which GEMMs and convolutions run Kiln's own kernels instead of a
// vendor library's (docs/GPU.md).
KernelPreference preference_from_environment() {
  const char* v = std::getenv("KILN_GPU_OWN_KERNELS");
  const std::string s = v ? v : "";
  if (s.empty() || s == "0") return KernelPreference::Default;
  if (s == "1") return KernelPreference::Own;
  if (s == "only") return KernelPreference::OwnOnly;
  fail(ErrorCode::InvalidArgument, "KILN_GPU_OWN_KERNELS must be 0, 1 or only, not '{}'", s);
}

}  // namespace

GpuBackendImpl::GpuBackendImpl(int index)
    : device_(index), info_(query_device(index)), preference_(preference_from_environment()) {
  name_ = info_.target.vendor + ":" + info_.target.arch;
  staging_ = std::make_unique<PinnedStaging>(device_);
  compute_ = std::make_unique<GpuStream>(device_);
  copy_ = std::make_unique<GpuStream>(device_);
}

DeviceBuffer GpuBackendImpl::allocate(size_t bytes) {
  KILN_GPU_CHECK(hipSetDevice(device_));
  void* p = nullptr;
  // A zero-byte request still gets a distinct, valid pointer, as the CPU backend's does.
  hipError_t status = hipMalloc(&p, bytes ? bytes : 1);
  if (status != hipSuccess) {
    (void)hipGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)hipMemGetInfo(&free_bytes, &total_bytes);
    (void)hipGetLastError();
    fail(ErrorCode::Unavailable,
         "out of GPU memory: {} bytes requested on {} ({}), {} free of {} ({})", bytes, name_,
         info_.name, gib(free_bytes), gib(total_bytes), hipGetErrorName(status));
  }
  int device = device_;
  return DeviceBuffer(p, bytes, [device](void* q) {
    (void)hipSetDevice(device);
    (void)hipFree(q);
  });
}

std::unique_ptr<Stream> GpuBackendImpl::create_stream() {
  return std::make_unique<GpuStream>(device_);
}

std::unique_ptr<Event> GpuBackendImpl::create_event() {
  return std::make_unique<GpuEvent>(device_);
}

GpuStream& GpuBackendImpl::own_stream(Stream& stream) const {
  GpuStream& s = gpu_stream(stream);
  KILN_CHECK_ARG(s.device() == device_, "a stream of GPU {} was given to the backend of GPU {}",
                 s.device(), device_);
  return s;
}

DeviceBuffer GpuBackendImpl::upload(const void* host, size_t bytes) {
  DeviceBuffer buf = allocate(bytes);
  copy_to_device(buf.data(), host, bytes, compute_stream());
  compute_stream().synchronize();
  return buf;
}

void GpuBackendImpl::copy_to_device(void* device_dst, const void* host_src, size_t bytes,
                                    Stream& stream) {
  GpuStream& s = own_stream(stream);
  if (bytes == 0) return;
  if (pinned_->contains(host_src, bytes)) {
    KILN_GPU_CHECK(hipSetDevice(device_));
    KILN_GPU_CHECK(hipMemcpyAsync(device_dst, host_src, bytes, hipMemcpyHostToDevice, s.handle()));
  } else {
    staging_->upload(device_dst, host_src, bytes, s.handle());
  }
}

void GpuBackendImpl::copy_to_host(void* host_dst, const void* device_src, size_t bytes,
                                  Stream& stream) {
  GpuStream& s = own_stream(stream);
  if (bytes == 0) return;
  if (pinned_->contains(host_dst, bytes)) {
    KILN_GPU_CHECK(hipSetDevice(device_));
    KILN_GPU_CHECK(hipMemcpyAsync(host_dst, device_src, bytes, hipMemcpyDeviceToHost, s.handle()));
  } else {
    staging_->download(host_dst, device_src, bytes, s.handle());
  }
}

void GpuBackendImpl::copy_device_to_device(void* device_dst, const void* device_src, size_t bytes,
                                           Stream& stream) {
  GpuStream& s = own_stream(stream);
  if (bytes == 0) return;
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(
      hipMemcpyAsync(device_dst, device_src, bytes, hipMemcpyDeviceToDevice, s.handle()));
}

void GpuBackendImpl::fill_device(void* device_dst, uint8_t value, size_t bytes, Stream& stream) {
  GpuStream& s = own_stream(stream);
  if (bytes == 0) return;
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(hipMemsetAsync(device_dst, value, bytes, s.handle()));
}

DeviceBuffer GpuBackendImpl::allocate_pinned(size_t bytes) {
  return allocate_pinned_buffer(device_, bytes, pinned_);
}

Support GpuBackendImpl::supports(const ir::Node& node) const {
  // The GPU's kernels are entries of this library's kernel table under "gpu" (each family
  // registers its own, beside its code); a node they refuse falls back to the CPU with the
  // executor's planned copies and warning, and the reason names this backend.
  const KernelTable& table = KernelTable::instance();
  Support s = table.for_op(kGpuKernelTable, node.domain(), node.op_type()).empty()
                  ? Support::no(fmt::format("no GPU kernel for {}", node.op_type()))
                  : table.select(*this, kGpuKernelTable, node);
  if (!s.ok()) s.reason = fmt::format("the GPU backend ({}): {}", name_, s.reason);
  return s;
}

std::unique_ptr<Kernel> GpuBackendImpl::create_kernel(const ir::Node& node,
                                                      std::string_view kernel_name) {
  return KernelTable::instance().create(*this, kGpuKernelTable, node, kernel_name);
}

std::vector<size_t> GpuBackendImpl::in_place_inputs(const ir::Node& node,
                                                    std::string_view kernel_name) const {
  const KernelDef* def =
      KernelTable::instance().find(kGpuKernelTable, node.domain(), node.op_type(), kernel_name);
  return def ? def->in_place_inputs : std::vector<size_t>{};
}

}  // namespace kiln::backends::gpu
