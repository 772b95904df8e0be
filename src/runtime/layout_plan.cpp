#include "runtime/layout_plan.hpp"

#include <limits>
#include <optional>

#include "runtime/memory_planner.hpp"

namespace kiln::runtime {
namespace {

using backends::Layout;

bool is_8bit(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8;
}

// A 4-D tensor with a static channel count of a type `layout` takes: float32 in either; float16
// only channels-last (the GPU's), bfloat16 only channel-blocked (`--bf16` engines' CPU
// convolutions); 8-bit integers only channels-last (the CPU's int8 convolutions), and only
// between kernels that say so (checked by the caller).
bool blockable_type(const ir::Value& v, Layout layout) {
  const TypeInfo& t = v.type();
  const bool last = layout.kind == Layout::Kind::ChannelsLast;
  const bool dtype_ok = t.dtype == DataType::Float32 || (t.dtype == DataType::Float16 && last) ||
                        (t.dtype == DataType::BFloat16 && !last) || (is_8bit(t.dtype) && last);
  return t.is_tensor() && dtype_ok && t.shape && t.shape->rank() == 4 &&
         t.shape->dims()[1].is_static();
}

// The non-row-major layout a step's kernel exchanges: its own, else its backend's.
Layout kernel_layout(const LayoutStep& s) {
  return s.layouts.layout.is_row_major() ? s.backend->activation_layout() : s.layouts.layout;
}

bool is_group_step(const LayoutStep& s) {
  return s.backend && (s.layouts.uniform || s.layouts.follows >= 0);
}

// Whether input slot k of a group step belongs to its group (shares output 0's layout).
bool in_group(const LayoutStep& s, size_t k) {
  return s.layouts.uniform || static_cast<int>(k) == s.layouts.follows;
}

// Whether a group step can compute with its group in `layout`.
bool group_takes(const LayoutStep& s, Layout layout) {
  return s.layouts.any_layout || layout == kernel_layout(s);
}

// Whether a kernel said it handles 8-bit integer tensors non-row-major.
bool takes_8bit(const LayoutStep& s) {
  return !s.layouts.layout.is_row_major() || s.layouts.any_layout;
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
  // want[v]: the layout v takes if it is not row-major. A kernel that writes output 0 in its
  // own right gives its layout; a group step (element-wise, broadcast) the one its group's
  // inputs share, in step order (producers first).
  std::vector<std::optional<Layout>> want(n);
  for (const LayoutStep& s : steps) {
    if (!s.backend || s.outputs.empty()) continue;
    const int v = s.outputs[0];
    if (v < 0 || pinned[v] || producer[v] < 0) continue;
    std::optional<Layout> layout;
    if (is_group_step(s)) {
      bool agree = true, none = true;
      for (size_t k = 0; k < s.inputs.size(); ++k) {
        const int in = s.inputs[k];
        if (in < 0 || !in_group(s, k)) continue;
        none = false;
        if (!want[in] || (layout && *layout != *want[in])) {
          agree = false;
        } else {
          layout = want[in];
        }
      }
      if (none) layout = kernel_layout(s);  // a group of the output alone
      if (!agree || (layout && !group_takes(s, *layout))) layout.reset();
    } else if (s.layouts.output0) {
      layout = kernel_layout(s);
    }
    if (!layout || layout->is_row_major() || !blockable_type(*values[v], *layout)) continue;
    if (is_8bit(values[v]->type().dtype) && !takes_8bit(s)) continue;
    want[v] = layout;
  }
  // Candidates: producer and every reader agree on the value's layout.
  std::vector<bool> block(n, false);
  for (size_t v = 0; v < n; ++v) block[v] = want[v].has_value();
  for (const LayoutStep& s : steps) {
    for (int v : s.reads) {
      if (v < 0 || !block[v]) continue;
      bool ok = s.backend == steps[producer[v]].backend;
      bool as_input = false;
      for (size_t k = 0; k < s.inputs.size() && ok; ++k) {
        if (s.inputs[k] != v) continue;
        as_input = true;
        if (is_group_step(s) && in_group(s, k)) {
          ok = group_takes(s, *want[v]);
        } else {
          ok = k == 0 && s.layouts.input0 && (s.layouts.input0_any || kernel_layout(s) == *want[v]);
        }
        if (is_8bit(values[v]->type().dtype)) ok = ok && takes_8bit(s);
      }
      if (!ok || !as_input) block[v] = false;  // a capture is read by the host: row-major
    }
  }
  // Group steps: all operands of the group in its layout or none, until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (const LayoutStep& s : steps) {
      if (!is_group_step(s)) continue;
      std::vector<int> group;
      for (size_t k = 0; k < s.inputs.size(); ++k) {
        const int v = s.inputs[k];
        if (v >= 0 && in_group(s, k)) group.push_back(v);
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
    if (block[v]) layouts[v] = *want[v];
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
