#pragma once
// Shape-inference building blocks shared by many ops.
#include <optional>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

// Output 0 has the type of input 0 (unary element-wise ops, activations).
void infer_same_as_input0(InferContext& ctx);
// Output 0 is the numpy broadcast of all inputs, typed like input 0 (Add, Mul, Where's values...).
void infer_broadcast(InferContext& ctx);
// Same shape rule, element type bool (comparisons, logical ops).
void infer_broadcast_bool(InferContext& ctx);
// Symbolic numpy broadcast of two shapes: equal symbols stay, 1 yields to the other dim,
// anything undecidable becomes an unknown dim. nullopt when a rank is unknown.
std::optional<Shape> broadcast_shapes(const AttrReader& ctx, const std::optional<Shape>& a,
                                      const std::optional<Shape>& b);

}  // namespace kiln::ops
