#pragma once
// Shapes whose dims are either known numbers or named symbols with an optional range, so dynamic
// batch and sequence length are first-class from import onwards.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class Dim {
 public:
  Dim() = default;                       // unknown and unnamed
  Dim(int64_t value) : value_(value) {}  // NOLINT: a number is a static dim
  static Dim symbol(std::string name, int64_t min = 0,
                    int64_t max = std::numeric_limits<int64_t>::max());

  bool is_static() const { return value_ >= 0; }
  bool is_symbolic() const { return value_ < 0 && !symbol_.empty(); }
  int64_t value() const { return value_; }  // -1 unless static
  const std::string& symbol_name() const { return symbol_; }
  int64_t min() const { return is_static() ? value_ : min_; }
  int64_t max() const { return is_static() ? value_ : max_; }
  std::string to_string() const;

  bool operator==(const Dim& other) const = default;

 private:
  int64_t value_ = -1;
  std::string symbol_;
  int64_t min_ = 0;
  int64_t max_ = std::numeric_limits<int64_t>::max();
};

class Shape {
 public:
  Shape() = default;
  Shape(std::vector<Dim> dims) : dims_(std::move(dims)) {}  // NOLINT
  static Shape from_values(const std::vector<int64_t>& values);

  size_t rank() const { return dims_.size(); }
  const Dim& operator[](size_t i) const { return dims_[i]; }
  Dim& operator[](size_t i) { return dims_[i]; }
  const std::vector<Dim>& dims() const { return dims_; }
  bool is_static() const;
  // The concrete dims; throws InvalidArgument naming `context` when any dim is not static.
  std::vector<int64_t> values(const char* context = "shape") const;
  std::string to_string() const;

  bool operator==(const Shape& other) const = default;

 private:
  std::vector<Dim> dims_;
};

// Number of elements; throws InvalidArgument on a negative dim or on overflow of int64.
int64_t shape_numel(const std::vector<int64_t>& dims);
std::string dims_to_string(const std::vector<int64_t>& dims);

}  // namespace kiln
