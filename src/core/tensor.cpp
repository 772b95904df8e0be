#include "core/tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace kiln {
namespace {

std::atomic<size_t> g_max_bytes{size_t{16} << 30};

std::shared_ptr<void> allocate(DataType dtype, int64_t numel) {
  size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  KILN_CHECK_ARG(numel == 0 || bytes / static_cast<size_t>(numel) == dtype_size(dtype),
                 "tensor of {} elements overflows size_t", numel);
  KILN_CHECK_ARG(bytes <= g_max_bytes.load(), "tensor of {} bytes exceeds the limit of {} bytes",
                 bytes, g_max_bytes.load());
  size_t rounded =
      (std::max<size_t>(bytes, 1) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  if (!p) fail(ErrorCode::Unavailable, "out of memory allocating {} bytes", bytes);
  if (dtype == DataType::String) {
    auto* s = static_cast<std::string*>(p);
    for (int64_t i = 0; i < numel; ++i) new (s + i) std::string();
    return std::shared_ptr<void>(p, [numel](void* q) {
      auto* strings = static_cast<std::string*>(q);
      for (int64_t i = 0; i < numel; ++i) strings[i].~basic_string();
      std::free(q);
    });
  }
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace

void Tensor::set_max_bytes(size_t bytes) {
  g_max_bytes.store(bytes);
}
size_t Tensor::max_bytes() {
  return g_max_bytes.load();
}

Tensor::Tensor(DataType dtype, std::vector<int64_t> dims)
    : dtype_(dtype), dims_(std::move(dims)), numel_(shape_numel(dims_)) {
  dtype_require_supported(dtype, "tensor");
  storage_ = allocate(dtype, numel_);
  data_ = storage_.get();
}

Tensor Tensor::view(DataType dtype, std::vector<int64_t> dims, void* data,
                    std::shared_ptr<void> owner) {
  dtype_require_supported(dtype, "tensor view");
  KILN_CHECK(dtype != DataType::String, ErrorCode::Internal, "string tensors cannot be views");
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = shape_numel(t.dims_);
  t.storage_ = std::move(owner);
  t.data_ = data;
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(dtype_, dims_);
  if (dtype_ == DataType::String) {
    std::copy_n(data<std::string>(), numel_, t.data<std::string>());
  } else if (nbytes()) {
    std::memcpy(t.data_, data_, nbytes());
  }
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  int64_t n = shape_numel(dims);
  KILN_CHECK_ARG(n == numel_, "cannot reshape {} to {}", describe(), dims_to_string(dims));
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

int64_t Tensor::int_at(int64_t i) const {
  KILN_CHECK(i >= 0 && i < numel_, ErrorCode::Internal, "int_at({}) out of range for {}", i,
             describe());
  if (dtype_is_low_precision(dtype_)) {
    return dispatch_dtype<DTypeSet::LowPrecision>(dtype_, "int_at", [&](auto tag) -> int64_t {
      using T = typename decltype(tag)::type;
      if constexpr (is_sub_byte_int_v<T>) {
        return static_cast<const T*>(data_)[i].to_int64();
      } else {
        fail(ErrorCode::InvalidArgument, "int_at: {} is not an integer tensor", describe());
      }
    });
  }
  return dispatch_dtype<DTypeSet::NumericBool>(dtype_, "int_at", [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    return static_cast<int64_t>(static_cast<const T*>(data_)[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  KILN_CHECK_ARG(dtype_is_integer(dtype_) || dtype_ == DataType::Bool,
                 "expected an integer tensor, got {}", describe());
  std::vector<int64_t> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = int_at(i);
  return out;
}

double Tensor::double_at(int64_t i) const {
  KILN_CHECK(i >= 0 && i < numel_, ErrorCode::Internal, "double_at({}) out of range for {}", i,
             describe());
  if (dtype_is_low_precision(dtype_)) {
    return dispatch_dtype<DTypeSet::LowPrecision>(dtype_, "double_at", [&](auto tag) -> double {
      using T = typename decltype(tag)::type;
      const T& v = static_cast<const T*>(data_)[i];
      if constexpr (is_sub_byte_int_v<T>) {
        return static_cast<double>(v.to_int64());
      } else {
        return v.to_double();
      }
    });
  }
  return dispatch_dtype<DTypeSet::NumericBool>(dtype_, "double_at", [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      return static_cast<double>(static_cast<float>(static_cast<const T*>(data_)[i]));
    } else {
      return static_cast<double>(static_cast<const T*>(data_)[i]);
    }
  });
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return fmt::format("{}{}", dtype_name(dtype_), dims_to_string(dims_));
}

void Tensor::check_type(DataType want) const {
  KILN_CHECK(dtype_ == want, ErrorCode::Internal, "tensor of type {} accessed as {}",
             dtype_name(dtype_), dtype_name(want));
}

}  // namespace kiln
