#include "runtime/memory_planner.hpp"

#include <algorithm>
#include <limits>
#include <set>

#include "ops/op_traits.hpp"

namespace kiln::runtime {

bool is_sized_tensor(const ir::Value& v) {
  const TypeInfo& t = v.type();
  return t.is_tensor() && t.shape && dtype_is_supported(t.dtype) && t.dtype != DataType::String;
}

std::optional<size_t> max_value_bytes(const ir::Value& v) {
  if (!is_sized_tensor(v)) return std::nullopt;
  const TypeInfo& t = v.type();
  size_t n = dtype_size(t.dtype);
  for (const Dim& d : t.shape->dims()) {
    int64_t m = d.max();
    if (!d.is_static() && m == std::numeric_limits<int64_t>::max()) return std::nullopt;
    if (m < 0 || __builtin_mul_overflow(n, static_cast<size_t>(m), &n)) return std::nullopt;
  }
  if (n > std::numeric_limits<size_t>::max() - kArenaAlignment) return std::nullopt;
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

std::string memory_type_key(const ir::Value& v) {
  const TypeInfo& t = v.type();
  if (!t.is_tensor() || !t.shape) return {};
  return std::string(dtype_name(t.dtype)) + t.shape->to_string();
}

bool is_view_op(const ir::Node& node) {
  // A view shares its data input's memory: without one (a malformed engine's node) it is a
  // kernel step, whose kernel reports the missing input.
  return ops::traits_of(node).view && node.outputs().size() == 1 && !node.inputs().empty() &&
         node.input(0) != nullptr;
}

StepMemoryPlan plan_step_memory(const std::vector<MemoryStep>& steps,
                                const std::vector<MemoryValue>& values) {
  StepMemoryPlan plan;
  plan.placed.resize(values.size());
  std::vector<size_t> last_read(values.size(), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int v : steps[i].reads) {
      if (v >= 0) last_read[v] = std::max(last_read[v], i);
    }
  }
  for (size_t v = 0; v < values.size(); ++v) {
    if (values[v].live_to_end) last_read[v] = steps.size();
  }

  // Spaces: values sharing one are planned as one buffer spanning all their lifetimes.
  struct Space {
    size_t bytes = 0, first = 0, last = 0;
    size_t offset = 0;
  };
  std::vector<Space> spaces;
  std::vector<int> space_of(values.size(), -1);
  std::vector<int> order_placed;  // values in the order they got space

  for (size_t i = 0; i < steps.size(); ++i) {
    const MemoryStep& s = steps[i];
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const int v = s.outputs[k];
      if (v < 0 || !values[v].planned) continue;
      const std::optional<size_t>& bytes = values[v].bytes;
      if (!bytes) {
        plan.unplanned.push_back(v);
        continue;
      }
      if (!s.writes_arena) continue;
      const size_t last = std::max(last_read[v], i);
      int shares = -1;
      if (k == 0 && s.view) {
        // A view of memory that lives elsewhere (a feed, a weight, a heap value) needs no space.
        const int x = s.inputs.empty() ? -1 : s.inputs[0];
        if (x < 0 || space_of[x] < 0) continue;
        shares = x;
      } else if (k == 0) {
        for (size_t in : s.in_place) {
          const int x = in < s.inputs.size() ? s.inputs[in] : -1;
          if (x < 0 || space_of[x] < 0 || values[x].type_key.empty() ||
              values[x].type_key != values[v].type_key) {
            continue;
          }
          // The space must be dead after this step, and no other input slot may read it here
          // (the same value in a slot not declared in place, a convolution's X also its
          // residual Z, reads elements the output overwrites).
          const int sp = space_of[x];
          bool other_reader = false;
          for (size_t j = 0; j < s.inputs.size(); ++j) {
            const int other = s.inputs[j];
            if (j == in || other < 0 || space_of[other] != sp) continue;
            const bool safe_slot = other == x && std::find(s.in_place.begin(), s.in_place.end(),
                                                           j) != s.in_place.end();
            other_reader |= !safe_slot;
          }
          if (spaces[sp].last <= i && !other_reader) {
            shares = x;
            break;
          }
        }
      }
      int sp;
      if (shares >= 0) {
        sp = space_of[shares];
        spaces[sp].bytes = std::max(spaces[sp].bytes, *bytes);
        spaces[sp].last = std::max(spaces[sp].last, last);
        ++plan.shared;
      } else {
        sp = static_cast<int>(spaces.size());
        spaces.push_back({*bytes, i, last, 0});
      }
      space_of[v] = sp;
      plan.placed[v] = PlacedValue{0, *bytes, i, last, shares};
      order_placed.push_back(v);
      plan.naive_bytes += *bytes;
    }
  }

  // Greedy by size (largest first): each space takes the lowest offset that does not overlap any
  // already placed space whose lifetime intersects its own.
  std::vector<size_t> order(spaces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return spaces[a].bytes > spaces[b].bytes; });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    Space& space = spaces[idx];
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of live-overlapping spaces
    for (size_t p : placed) {
      const Space& o = spaces[p];
      if (o.first <= space.last && space.first <= o.last)
        busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (offset + space.bytes <= start) break;
      offset = std::max(offset, end);
    }
    space.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + space.bytes);
    placed.push_back(idx);
  }
  for (int v : order_placed) {
    const Space& s = spaces[space_of[v]];
    PlacedValue& p = *plan.placed[v];
    p.offset = s.offset;
    p.first_step = s.first;
    p.last_step = s.last;
  }
  return plan;
}

MemoryPlan plan_memory(const ir::Graph& graph, const PlanOptions& options) {
  const std::vector<ir::Node*> nodes = graph.nodes();
  std::map<const ir::Value*, int> index;
  std::vector<const ir::Value*> by_index;
  auto id = [&](const ir::Value* v) {
    if (!v) return -1;
    auto [it, added] = index.emplace(v, static_cast<int>(by_index.size()));
    if (added) by_index.push_back(v);
    return it->second;
  };
  std::vector<MemoryStep> steps(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    MemoryStep& s = steps[i];
    for (const ir::Value* v : n.inputs()) s.inputs.push_back(id(v));
    for (const ir::Value* v : n.outputs()) s.outputs.push_back(id(v));
    s.view = options.in_place && is_view_op(n);
    if (options.in_place && options.in_place_inputs && !s.view)
      s.in_place = options.in_place_inputs(n);
  }
  const auto uses = graph.compute_uses();
  std::map<const ir::Node*, size_t> step_of;
  for (size_t i = 0; i < nodes.size(); ++i) step_of[nodes[i]] = i;
  for (const auto& [v, readers] : uses) {
    auto vi_it = index.find(v);
    if (vi_it == index.end()) continue;  // an outer scope's value no node here reads directly
    const int vi = vi_it->second;
    for (const ir::Node* r : readers) {
      auto it = step_of.find(r);
      if (it != step_of.end()) steps[it->second].reads.push_back(vi);
    }
  }
  std::vector<MemoryValue> values(by_index.size());
  for (size_t v = 0; v < by_index.size(); ++v) {
    const ir::Value& value = *by_index[v];
    values[v].bytes = max_value_bytes(value);
    values[v].live_to_end = graph.is_output(&value);
    values[v].planned = options.plan_graph_outputs || !values[v].live_to_end;
    values[v].type_key = memory_type_key(value);
  }
  StepMemoryPlan sp = plan_step_memory(steps, values);
  MemoryPlan plan;
  plan.arena_bytes = sp.arena_bytes;
  plan.naive_bytes = sp.naive_bytes;
  plan.shared = sp.shared;
  for (int v : sp.unplanned) plan.unplanned.push_back(by_index[v]);
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int v : steps[i].outputs) {
      if (v < 0 || !sp.placed[v]) continue;
      const PlacedValue& p = *sp.placed[v];
      plan.buffers.push_back({by_index[v], p.offset, p.bytes, p.first_step, p.last_step,
                              p.shares >= 0 ? by_index[p.shares] : nullptr});
    }
  }
  return plan;
}

}  // namespace kiln::runtime
