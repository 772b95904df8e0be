#include "backends/backend.hpp"

#include <utility>

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

size_t DeviceTensor::nbytes() const {
  return defined() ? static_cast<size_t>(numel()) * dtype_size(dtype) : 0;
}

}  // namespace kiln::backends
