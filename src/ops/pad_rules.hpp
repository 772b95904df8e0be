#pragma once
// Pad's rules: its mode, the full begin / end pads per axis, where a padded position reads from,
// and the plan of a pad over given dims (negative pads crop first). Shared by the reference
// kernel (ops/slicing.cpp) and the CPU backend's (backends/cpu/pad_kernel.cpp).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_utils.hpp"

namespace kiln::ops {

enum class PadMode { Constant, Reflect, Edge, Wrap };

inline PadMode pad_mode(const AttrReader& ctx) {
  std::string m = ctx.attr_string("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap") return PadMode::Wrap;
  ctx.fail("unknown pad mode '{}'", m);
}

// Full begin/end pads per axis: [b0..b(r-1), e0..e(r-1)].
inline std::vector<int64_t> expand_pads(const AttrReader& ctx, const std::vector<int64_t>& pads,
                                        const std::vector<int64_t>& axes, int64_t rank) {
  ctx.check(pads.size() == 2 * axes.size(), "pads has {} entries for {} axes", pads.size(),
            axes.size());
  std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
  std::vector<int64_t> norm = normalize_axes(ctx, axes, rank);
  for (size_t i = 0; i < norm.size(); ++i) {
    full[static_cast<size_t>(norm[i])] = pads[i];
    full[static_cast<size_t>(norm[i] + rank)] = pads[i + norm.size()];
  }
  return full;
}

inline std::vector<int64_t> all_axes(int64_t rank) {
  std::vector<int64_t> axes(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) axes[static_cast<size_t>(i)] = i;
  return axes;
}

// Maps a padded position back into an axis of length n (after negative pads cropped it), or -1
// for the constant fill.
inline int64_t pad_source(PadMode mode, int64_t pos, int64_t n) {
  if (pos >= 0 && pos < n) return pos;
  switch (mode) {
    case PadMode::Constant:
      return -1;
    case PadMode::Edge:
      return pos < 0 ? 0 : n - 1;
    case PadMode::Wrap:
      return ((pos % n) + n) % n;
    case PadMode::Reflect: {
      if (n == 1) return 0;
      int64_t period = 2 * (n - 1);
      int64_t p = ((pos % period) + period) % period;
      return p < n ? p : period - p;
    }
  }
  return -1;
}

// Per axis: the first element kept (lo) and how many (len) after negative pads crop, the
// positions added before it, and the padded dims.
struct PadPlan {
  std::vector<int64_t> lo, len, before, out_dims;
};

inline PadPlan plan_pad(const AttrReader& ctx, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& full, PadMode mode,
                        const std::vector<int64_t>& pads) {
  const size_t rank = dims.size();
  PadPlan p;
  p.lo.resize(rank), p.len.resize(rank), p.before.resize(rank), p.out_dims.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t b = full[i], e = full[i + rank];
    ctx.check(b >= -dims[i] && e >= -dims[i], "pads {} crop more than axis {} holds",
              dims_to_string(pads), i);
    p.lo[i] = std::max<int64_t>(0, -b);
    p.len[i] = dims[i] - p.lo[i] - std::max<int64_t>(0, -e);
    ctx.check(p.len[i] >= 0, "pads {} crop more than axis {} holds", dims_to_string(pads), i);
    p.before[i] = std::max<int64_t>(0, b);
    auto grown = add_dims(p.len[i], p.before[i]);
    if (grown) grown = add_dims(*grown, std::max<int64_t>(0, e));
    ctx.check(grown.has_value(), "padded axis {} overflows", i);
    p.out_dims[i] = *grown;
    if (mode != PadMode::Constant && p.out_dims[i] > p.len[i]) {
      ctx.check(p.len[i] > 0, "cannot pad an empty axis {} in this mode", i);
    }
  }
  return p;
}

}  // namespace kiln::ops
