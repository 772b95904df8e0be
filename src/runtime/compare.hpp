#pragma once
// Numerical comparison of run results against expected values, as used by conformance and verify.
#include <optional>
#include <string>

#include "core/rt_value.hpp"

namespace kiln::runtime {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-7;
};

struct Difference {
  double max_abs = 0;
  double max_rel = 0;
};

// nullopt when `actual` matches `expected` (same kind, type and dims; floats within
// |a - e| <= atol + rtol * |e|, NaN matching NaN; everything else exact). Otherwise a message
// saying what differs and where.
std::optional<std::string> compare_values(const RtValue& actual, const RtValue& expected,
                                          Tolerance tol);
// Largest absolute and relative element difference of two same-shaped real tensors.
Difference tensor_difference(const Tensor& actual, const Tensor& expected);

}  // namespace kiln::runtime
