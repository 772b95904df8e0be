#include "runtime/layout_plan.hpp"

#include <limits>

#include "runtime/memory_planner.hpp"

namespace kiln::runtime {
namespace {

// A 4-D float tensor with a static channel count: the only values a blocked layout applies to
// (float16 ones only channels-last: the CPU's blocked kernels are float32).
bool blockable_type(const ir::Value& v, backends::Layout layout) {
  const TypeInfo& t = v.type();
  // bfloat16 blocked: `--bf16` engines' convolutions on the CPU (only kernels that compute in
  // bfloat16 declare blocked layouts for such values).
  const bool dtype_ok =
      t.dtype == DataType::Float32 ||
      (t.dtype == DataType::Float16 && layout.kind == backends::Layout::Kind::ChannelsLast) ||
      (t.dtype == DataType::BFloat16 && layout.kind == backends::Layout::Kind::ChannelBlocked);
  return t.is_tensor() && dtype_ok && t.shape && t.shape->rank() == 4 &&
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
  // block[v]: the value may take its producer's activation layout (decided below).
  std::vector<bool> block(n, false);
  for (size_t v = 0; v < n; ++v) {
    const int p = producer[v];
    if (pinned[v] || p < 0) continue;
    const LayoutStep& ps = steps[p];
    if (!ps.backend || ps.backend->activation_layout().is_row_major()) continue;
    if (!blockable_type(*values[v], ps.backend->activation_layout())) continue;
    if (ps.outputs.empty() || ps.outputs[0] != static_cast<int>(v)) continue;
    if (!ps.layouts.output0 && !ps.layouts.uniform && ps.layouts.follows < 0) continue;
    block[v] = true;
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
      if (!ok || !as_input) block[v] = false;  // a capture is read by the host: row-major
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
        all &= block[v];
        any |= block[v];
      }
      if (any && !all) {
        for (int v : group) block[v] = false;
        changed = true;
      }
    }
  }
  std::vector<backends::Layout> layouts(n);
  for (size_t v = 0; v < n; ++v) {
    if (block[v]) layouts[v] = steps[producer[v]].backend->activation_layout();
  }
  return layouts;
}

std::optional<size_t> max_value_bytes_in(const ir::Value& v, backends::Layout layout) {
  const int block = layout.kind == backends::Layout::Kind::ChannelBlocked ? layout.block : 0;
  std::optional<size_t> plain = max_value_bytes(v);
  if (block <= 0 || !plain || !blockable_type(v, layout)) return plain;
  const int64_t c = v.type().shape->dims()[1].value();
  const int64_t padded = (c + block - 1) / block * block;
  if (c == padded) return plain;
  if (c == 0) return plain;
  // Every other dim is bounded (max_value_bytes said so): scale the bound by the padding.
  size_t bytes = dtype_size(v.type().dtype);
  for (const Dim& d : v.type().shape->dims()) {
    const int64_t m = &d == &v.type().shape->dims()[1] ? padded : d.max();
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(m), &bytes)) return std::nullopt;
  }
  if (bytes > std::numeric_limits<size_t>::max() - kArenaAlignment) return std::nullopt;
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

}  // namespace kiln::runtime
