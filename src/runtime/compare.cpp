#include "runtime/compare.hpp"

#include <cmath>

namespace kiln::runtime {
namespace {

std::optional<std::string> compare_tensors(const Tensor& a, const Tensor& e, Tolerance tol) {
  if (a.dtype() != e.dtype()) {
    return fmt::format("element type {} != expected {}", dtype_name(a.dtype()),
                       dtype_name(e.dtype()));
  }
  if (a.dims() != e.dims()) {
    return fmt::format("shape {} != expected {}", dims_to_string(a.dims()),
                       dims_to_string(e.dims()));
  }
  if (a.dtype() == DataType::String) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (a.data<std::string>()[i] != e.data<std::string>()[i]) {
        return fmt::format("string element {} is '{}', expected '{}'", i, a.data<std::string>()[i],
                           e.data<std::string>()[i]);
      }
    }
    return std::nullopt;
  }
  if (dtype_is_low_precision(a.dtype())) {
    // Every value of these types is exact: compare values (NaN equals NaN, -0 equals 0).
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = a.double_at(i), y = e.double_at(i);
      if (!(x == y || (std::isnan(x) && std::isnan(y)))) {
        return fmt::format("element {} is {}, expected {}", i, x, y);
      }
    }
    return std::nullopt;
  }
  if (dtype_is_float(a.dtype())) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = a.double_at(i), y = e.double_at(i);
      bool ok = (std::isnan(x) && std::isnan(y)) || x == y ||
                std::fabs(x - y) <= tol.atol + tol.rtol * std::fabs(y);
      if (!ok && bad++ == 0) first = i;
    }
    if (bad) {
      Difference d = tensor_difference(a, e);
      return fmt::format(
          "{} of {} elements differ (first at {}: {} vs expected {}); max abs {:.3g}, "
          "max rel {:.3g}",
          bad, a.numel(), first, a.double_at(first), e.double_at(first), d.max_abs, d.max_rel);
    }
    return std::nullopt;
  }
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.int_at(i) != e.int_at(i)) {
      if (a.dtype() == DataType::UInt64 && static_cast<const uint64_t*>(a.raw_data())[i] ==
                                               static_cast<const uint64_t*>(e.raw_data())[i]) {
        continue;
      }
      return fmt::format("element {} is {}, expected {}", i, a.int_at(i), e.int_at(i));
    }
  }
  return std::nullopt;
}

}  // namespace

Difference tensor_difference(const Tensor& a, const Tensor& e) {
  Difference d;
  for (int64_t i = 0; i < std::min(a.numel(), e.numel()); ++i) {
    double x = a.double_at(i), y = e.double_at(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    double abs = std::fabs(x - y);
    if (std::isnan(abs)) abs = INFINITY;
    d.max_abs = std::max(d.max_abs, abs);
    if (y != 0) d.max_rel = std::max(d.max_rel, abs / std::fabs(y));
  }
  return d;
}

std::optional<std::string> compare_values(const RtValue& actual, const RtValue& expected,
                                          Tolerance tol) {
  if (actual.kind() != expected.kind()) {
    return fmt::format("got {}, expected {}", actual.describe(), expected.describe());
  }
  if (actual.is_tensor()) return compare_tensors(actual.tensor(), expected.tensor(), tol);
  if (actual.is_sequence()) {
    const auto& a = actual.sequence();
    const auto& e = expected.sequence();
    if (a.size() != e.size()) {
      return fmt::format("sequence of {} tensors, expected {}", a.size(), e.size());
    }
    for (size_t i = 0; i < a.size(); ++i) {
      if (auto m = compare_tensors(a[i], e[i], tol))
        return fmt::format("sequence item {}: {}", i, *m);
    }
  }
  return std::nullopt;
}

}  // namespace kiln::runtime
