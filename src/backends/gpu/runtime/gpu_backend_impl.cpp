#include "backends/gpu/runtime/gpu_backend_impl.hpp"

#include <fmt/format.h>

#include "backends/gpu/runtime/device_query.hpp"
#include "backends/gpu/runtime/elementwise_kernels.hpp"
#include "backends/gpu/runtime/gemm_kernels.hpp"
#include "backends/gpu/runtime/gpu_check.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

std::string gib(uint64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
}

}  // namespace

GpuBackendImpl::GpuBackendImpl(int index) : device_(index), info_(query_device(index)) {
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
  // Element-wise kernels and cuBLASLt products so far; a node they refuse falls back to the CPU
  // with the executor's planned copies and warning, and the reason names this backend.
  Support s = elementwise_support(node);
  if (!s.ok()) {
    Support g = gemm_support(node);
    if (g.ok()) return g;
    if (node.op_type().find("MatMul") != std::string::npos ||
        node.op_type().find("Gemm") != std::string::npos) {
      s = g;
    }
  }
  if (!s.ok()) s.reason = fmt::format("the GPU backend ({}): {}", name_, s.reason);
  return s;
}

std::unique_ptr<Kernel> GpuBackendImpl::create_kernel(const ir::Node& node,
                                                      std::string_view kernel_name) {
  if (auto kernel = create_elementwise_kernel(node, kernel_name)) return kernel;
  if (auto kernel = create_gemm_kernel(*this, node, kernel_name)) return kernel;
  fail(ErrorCode::Unsupported, "the GPU backend ({}) has no kernel '{}' (node {} of type {})",
       name_, kernel_name, node.name(), node.op_type());
}

std::vector<size_t> GpuBackendImpl::in_place_inputs(const ir::Node& node,
                                                    std::string_view kernel_name) const {
  return elementwise_in_place_inputs(node, kernel_name);
}

}  // namespace kiln::backends::gpu
