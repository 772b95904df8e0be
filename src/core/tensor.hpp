#pragma once
// A dense tensor: element type, concrete dims and a reference-counted, 64-byte aligned buffer.
// Copies share the buffer (like a shared_ptr); clone() makes a deep copy. A view borrows memory
// owned elsewhere (an mmapped file, a caller's array) and keeps its owner alive.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/shape.hpp"

namespace kiln {

inline constexpr size_t kTensorAlignment = 64;

class Tensor {
 public:
  Tensor() = default;  // undefined: no type, no storage
  // Owning, zero-filled (strings empty).
  Tensor(DataType dtype, std::vector<int64_t> dims);
  // Borrows `data`; `owner` is kept alive as long as any copy of this tensor.
  static Tensor view(DataType dtype, std::vector<int64_t> dims, void* data,
                     std::shared_ptr<void> owner);
  template <typename T>
  static Tensor scalar(T value) {
    Tensor t(dtype_of<T>, {});
    t.data<T>()[0] = std::move(value);
    return t;
  }
  template <typename T>
  static Tensor from_vector(std::vector<int64_t> dims, const std::vector<T>& values);

  bool defined() const { return dtype_ != DataType::Undefined; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  size_t rank() const { return dims_.size(); }
  int64_t dim(size_t i) const { return dims_[i]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    check_type(dtype_of<T>);
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>);
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::span<const T> values() const {
    return {data<T>(), static_cast<size_t>(numel_)};
  }
  template <typename T>
  std::span<T> values() {
    return {data<T>(), static_cast<size_t>(numel_)};
  }

  // Deep copy into fresh storage.
  Tensor clone() const;
  // Same storage, other dims with the same element count.
  Tensor reshaped(std::vector<int64_t> dims) const;
  // Reads element i of any integer or bool tensor (int4/int2 too) as int64 (for shape-like inputs).
  int64_t int_at(int64_t i) const;
  // All elements of an integer tensor as int64 (for shape, axes, indices inputs).
  std::vector<int64_t> to_int64_vector() const;
  // Element i of any real-valued tensor (float8/float4 too) as double (for scalar attributes
  // given as inputs).
  double double_at(int64_t i) const;
  std::string describe() const;  // "float[2,3]"

  // Largest single allocation; bigger requests fail with InvalidArgument instead of exhausting
  // memory when a malformed model declares absurd sizes.
  static void set_max_bytes(size_t bytes);
  static size_t max_bytes();

 private:
  void check_type(DataType want) const;

  DataType dtype_ = DataType::Undefined;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

template <typename T>
Tensor Tensor::from_vector(std::vector<int64_t> dims, const std::vector<T>& values) {
  Tensor t(dtype_of<T>, std::move(dims));
  KILN_CHECK(static_cast<size_t>(t.numel()) == values.size(), ErrorCode::Internal,
             "from_vector: {} values for {} elements", values.size(), t.numel());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace kiln
