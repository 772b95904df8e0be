#pragma once
// Import-time values of small integer tensors (shapes, axes, pads) for shape inference. Besides
// initializers and Constant nodes this looks through the usual shape arithmetic of exported
// models (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), so a Reshape to
// [batch, -1] keeps the symbolic batch dim instead of losing it.
#include <optional>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

// One element of an integer tensor known at import time: a number, or else a dim (symbolic
// when it came from a symbolic input dim, unknown otherwise).
struct SymValue {
  std::optional<int64_t> number;
  Dim dim;

  static SymValue of(int64_t v) { return {v, Dim()}; }
  static SymValue of_dim(const Dim& d) {
    return d.is_static() ? SymValue{d.value(), Dim()} : SymValue{std::nullopt, d};
  }
  // As an output dimension: negative numbers are not dims, so they become unknown.
  Dim as_dim() const { return number ? (*number >= 0 ? Dim(*number) : Dim()) : dim; }
};
using SymValues = std::vector<SymValue>;

// The flat values of a 0-D or 1-D integer input, nullopt when they cannot be determined.
std::optional<SymValues> input_sym_values(const InferContext& ctx, size_t i);

}  // namespace kiln::ops
