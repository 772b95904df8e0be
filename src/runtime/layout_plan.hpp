#pragma once
// Layout assignment: which activations stay channel-blocked (oneDNN's nChw16c) between the fast
// kernels of one backend, so that consecutive convolutions, pooling and element-wise ops run on
// the layout oneDNN's direct kernels want without a reorder per op. A value is blocked only when
// its producer can write it blocked, every reader can read it blocked, and it is neither a graph
// input, a graph output nor a constant; element-wise style kernels (uniform) need all their
// tensor operands in one layout, broadcast ones (follows) their full-shape operand and output.
// Everything else stays row-major, so reorders happen only inside the kernels at the edges of a
// blocked region (a convolution reading a plain input, global pooling reading a blocked one).
#include <vector>

#include "backends/backend.hpp"
#include "ir/graph.hpp"

namespace kiln::runtime {

// One executor step, as layout assignment sees it.
struct LayoutStep {
  backends::Backend* backend = nullptr;  // null: not a fast kernel (host reference, view)
  backends::BlockedLayouts layouts;
  std::vector<int> inputs, outputs;  // value indices, -1 for an empty slot
  std::vector<int> reads;            // every value the step reads (subgraph captures included)
};

// The layout of every value (by index). `values[i]` is the value of index i;
// `pinned[i]` marks values that must stay row-major (graph inputs, outputs, constants).
std::vector<backends::Layout> plan_layouts(const std::vector<LayoutStep>& steps,
                                           const std::vector<const ir::Value*>& values,
                                           const std::vector<bool>& pinned);

// Upper bound of a value's bytes in `layout` by layout_numel (max_value_bytes when row-major),
// overflow-checked, or nullopt when unbounded.
std::optional<size_t> max_value_bytes_in(const ir::Value& v, backends::Layout layout);

}  // namespace kiln::runtime
