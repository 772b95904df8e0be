#include "runtime/layout_plan.hpp"

#include <limits>

#include "runtime/memory_planner.hpp"

namespace kiln::runtime {
namespace {

// A 4-D float tensor with a static channel count: the only values a blocked layout applies to.
bool blockable_type(const ir::Value& v) {
  const TypeInfo& t = v.type();
  return t.is_tensor() && t.dtype == DataType::Float32 && t.shape && t.shape->rank() == 4 &&
         t.shape->dims()[1].is_static();
}

}  // namespace

std::vector<backends::Layout> plan_layouts(const std::vector<LayoutStep>& steps,
                                           const std::vector<const ir::Value*>& values,
                                           const std::vector<bool>& pinned) {
  const size_t n = values.size();
  std::vector<int> producer(n, -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (int v : steps[s].outputs) {
      if (v >= 0) producer[v] = static_cast<int>(s);
    }
  }
  // Candidates: producer and every reader agree that the value may be blocked.
  std::vector<int> block(n, 0);
  for (size_t v = 0; v < n; ++v) {
    const int p = producer[v];
    if (pinned[v] || p < 0 || !blockable_type(*values[v])) continue;
    const LayoutStep& ps = steps[p];
    if (!ps.backend || ps.backend->activation_layout().is_row_major()) continue;
    if (ps.outputs.empty() || ps.outputs[0] != static_cast<int>(v)) continue;
    if (!ps.layouts.output0 && !ps.layouts.uniform && ps.layouts.follows < 0) continue;
    block[v] = ps.backend->activation_layout().block;
  }
  for (const LayoutStep& s : steps) {
    for (int v : s.reads) {
      if (v < 0 || !block[v]) continue;
      bool ok = s.backend == steps[producer[v]].backend;
      bool as_input = false;
      for (size_t k = 0; k < s.inputs.size() && ok; ++k) {
        if (s.inputs[k] != v) continue;
        as_input = true;
        ok = s.layouts.uniform || (k == 0 && s.layouts.input0) ||
             static_cast<int>(k) == s.layouts.follows;
      }
      if (!ok || !as_input) block[v] = 0;  // a capture is read by the host: row-major
    }
  }
  // Uniform steps: all operands blocked or none, until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (const LayoutStep& s : steps) {
      if (!s.backend || (!s.layouts.uniform && s.layouts.follows < 0)) continue;
      std::vector<int> group;
      for (size_t k = 0; k < s.inputs.size(); ++k) {
        const int v = s.inputs[k];
        if (v >= 0 && (s.layouts.uniform || static_cast<int>(k) == s.layouts.follows)) {
          group.push_back(v);
        }
      }
      if (!s.outputs.empty() && s.outputs[0] >= 0) group.push_back(s.outputs[0]);
      bool all = !group.empty();
      bool any = false;
      for (int v : group) {
        all &= block[v] > 0;
        any |= block[v] > 0;
      }
      if (any && !all) {
        for (int v : group) block[v] = 0;
        changed = true;
      }
    }
  }
  std::vector<backends::Layout> layouts(n);
  for (size_t v = 0; v < n; ++v) {
    if (block[v] > 0) layouts[v] = backends::Layout::channel_blocked(block[v]);
  }
  return layouts;
}

std::optional<size_t> max_value_bytes_in(const ir::Value& v, backends::Layout layout) {
  const int block = layout.is_row_major() ? 0 : layout.block;
  std::optional<size_t> plain = max_value_bytes(v);
  if (block <= 0 || !plain || !blockable_type(v)) return plain;
  const int64_t c = v.type().shape->dims()[1].value();
  const int64_t padded = (c + block - 1) / block * block;
  if (c == padded) return plain;
  if (c == 0) return plain;
  // Every other dim is bounded (max_value_bytes said so): scale the bound by the padding.
  size_t bytes = dtype_size(DataType::Float32);
  for (const Dim& d : v.type().shape->dims()) {
    const int64_t m = &d == &v.type().shape->dims()[1] ? padded : d.max();
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(m), &bytes)) return std::nullopt;
  }
  if (bytes > std::numeric_limits<size_t>::max() - kArenaAlignment) return std::nullopt;
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

}  // namespace kiln::runtime
