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
  return layout_numel(dims, layout);
}

size_t DeviceTensor::nbytes() const {
  return defined() ? static_cast<size_t>(storage_numel()) * dtype_size(dtype) : 0;
}

void Stream::begin_capture() {
  fail(ErrorCode::Unsupported, "this stream cannot record work for replay");
}

std::unique_ptr<CapturedWork> Stream::end_capture() {
  fail(ErrorCode::Unsupported, "this stream cannot record work for replay");
}

std::string Layout::to_string() const {
  switch (kind) {
    case Kind::RowMajor:
      return "row-major";
    case Kind::ChannelBlocked:
      return fmt::format("channel-blocked {}", block);
    case Kind::ChannelsLast:
      return "channels-last";
  }
  return "?";
}

int64_t layout_numel(const std::vector<int64_t>& dims, Layout layout) {
  if (layout.kind != Layout::Kind::ChannelBlocked || layout.block <= 0 || dims.size() < 2) {
    return shape_numel(dims);
  }
  std::vector<int64_t> padded = dims;
  padded[1] = (dims[1] + layout.block - 1) / layout.block * layout.block;
  return shape_numel(padded);
}

size_t Backend::storage_bytes(DataType dtype, const std::vector<int64_t>& dims,
                              Layout layout) const {
  return static_cast<size_t>(layout_numel(dims, layout)) * dtype_size(dtype);
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
