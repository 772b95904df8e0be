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
// min(s, n) for a symbolic dim s and a static length n >= 2: what x[:s] makes of an axis of n
// (BERT exports slice their position ids [1, 512] to the sequence length). A symbol of its own,
// bounded by n, that broadcast_shapes knows against s.
Dim clamped_symbol(const Dim& s, int64_t n);
// Symbolic numpy broadcast of two shapes: equal symbols stay, 1 yields to the other dim, s
// against min(s, n) is s (equal when s <= n; else n and s differ and neither is 1, so only a
// failing run gets there), anything undecidable becomes an unknown dim. nullopt when a rank is
// unknown.
std::optional<Shape> broadcast_shapes(const AttrReader& ctx, const std::optional<Shape>& a,
                                      const std::optional<Shape>& b);

}  // namespace kiln::ops
