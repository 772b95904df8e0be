#include "backends/backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "backends/kernel_table.hpp"
#include "core/tensor.hpp"

namespace kiln::backends {

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::Gpu:
      return "gpu";
  }
  return "?";
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    release_ = std::move(other.release_);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (data_ && release_) release_(data_);
  data_ = nullptr;
  size_ = 0;
}

int64_t DeviceTensor::numel() const {
  return shape_numel(dims);
}

int64_t DeviceTensor::storage_numel() const {
  return blocked_numel(dims, block);
}

size_t DeviceTensor::nbytes() const {
  return defined() ? static_cast<size_t>(storage_numel()) * dtype_size(dtype) : 0;
}

int64_t blocked_numel(const std::vector<int64_t>& dims, int block) {
  if (block <= 0 || dims.size() < 2) return shape_numel(dims);
  std::vector<int64_t> padded = dims;
  padded[1] = (dims[1] + block - 1) / block * block;
  return shape_numel(padded);
}

DeviceBuffer Backend::allocate_host(size_t bytes) {
  // Plain aligned host memory, as the CPU backend's (not called through it: the GPU library
  // links this file without the CPU backend).
  const size_t rounded =
      (std::max<size_t>(bytes, 1) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  KILN_CHECK(p, ErrorCode::Unavailable, "out of memory allocating {} bytes of host memory", bytes);
  return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
}

std::vector<size_t> Backend::in_place_inputs(const ir::Node& node,
                                             std::string_view kernel_name) const {
  const KernelDef* def =
      KernelTable::instance().find(name(), node.domain(), node.op_type(), kernel_name);
  return def ? def->in_place_inputs : std::vector<size_t>{};
}

}  // namespace kiln::backends
