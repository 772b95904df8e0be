#include "runtime/memory_planner.hpp"

#include <algorithm>
#include <optional>

namespace kiln::runtime {
namespace {

// Upper bound of a value's size in bytes, or nullopt when some dim has no bound.
std::optional<size_t> max_bytes(const ir::Value& v) {
  const TypeInfo& t = v.type();
  if (!t.is_tensor() || !t.shape || !dtype_is_supported(t.dtype) || t.dtype == DataType::String) {
    return std::nullopt;
  }
  size_t n = dtype_size(t.dtype);
  for (const Dim& d : t.shape->dims()) {
    int64_t m = d.max();
    if (!d.is_static() && m == std::numeric_limits<int64_t>::max()) return std::nullopt;
    if (m < 0 || __builtin_mul_overflow(n, static_cast<size_t>(m), &n)) return std::nullopt;
  }
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

}  // namespace

MemoryPlan plan_memory(const ir::Graph& graph) {
  MemoryPlan plan;
  const std::vector<ir::Node*> nodes = graph.nodes();
  const auto uses = graph.compute_uses();
  std::map<const ir::Node*, size_t> step;
  for (size_t i = 0; i < nodes.size(); ++i) step[nodes[i]] = i;

  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const ir::Value* v : nodes[i]->outputs()) {
      if (!v) continue;
      std::optional<size_t> bytes = max_bytes(*v);
      if (!bytes) {
        plan.unplanned.push_back(v);
        continue;
      }
      size_t last = i;
      auto it = uses.find(v);
      if (it != uses.end()) {
        for (const ir::Node* reader : it->second) last = std::max(last, step.at(reader));
      }
      if (graph.is_output(v)) last = nodes.size();
      plan.buffers.push_back({v, 0, *bytes, i, last});
      plan.naive_bytes += *bytes;
    }
  }

  // Greedy by size (largest first): each buffer takes the lowest offset that does not overlap any
  // already placed buffer whose lifetime intersects its own.
  std::vector<size_t> order(plan.buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return plan.buffers[a].bytes > plan.buffers[b].bytes;
  });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    PlannedBuffer& buf = plan.buffers[idx];
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of live-overlapping buffers
    for (size_t p : placed) {
      const PlannedBuffer& o = plan.buffers[p];
      if (o.first_step <= buf.last_step && buf.first_step <= o.last_step) {
        busy.emplace_back(o.offset, o.offset + o.bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (offset + buf.bytes <= start) break;
      offset = std::max(offset, end);
    }
    buf.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + buf.bytes);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace kiln::runtime
