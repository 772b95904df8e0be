#include "core/shape.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace kiln {

Dim Dim::symbol(std::string name, int64_t min, int64_t max) {
  Dim d;
  d.symbol_ = std::move(name);
  d.min_ = min;
  d.max_ = max;
  return d;
}

std::string Dim::to_string() const {
  if (is_static()) return std::to_string(value_);
  if (symbol_.empty()) return "?";
  if (min_ == 0 && max_ == std::numeric_limits<int64_t>::max()) return symbol_;
  return fmt::format("{}[{}..{}]", symbol_, min_, max_);
}

Shape Shape::from_values(const std::vector<int64_t>& values) {
  std::vector<Dim> dims(values.begin(), values.end());
  return Shape(std::move(dims));
}

bool Shape::is_static() const {
  for (const Dim& d : dims_) {
    if (!d.is_static()) return false;
  }
  return true;
}

std::vector<int64_t> Shape::values(const char* context) const {
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Dim& d : dims_) {
    KILN_CHECK_ARG(d.is_static(), "{}: dim {} of {} is not static", context, d.to_string(),
                   to_string());
    out.push_back(d.value());
  }
  return out;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += dims_[i].to_string();
  }
  return s + "]";
}

int64_t shape_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    KILN_CHECK_ARG(d >= 0, "negative dimension {} in shape {}", d, dims_to_string(dims));
    KILN_CHECK_ARG(!__builtin_mul_overflow(n, d, &n), "element count of shape {} overflows",
                   dims_to_string(dims));
  }
  return n;
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

}  // namespace kiln
