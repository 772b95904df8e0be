#include "runtime/memory_planner.hpp"

#include <algorithm>
#include <limits>
#include <set>

#include "ops/op_traits.hpp"

namespace kiln::runtime {

std::optional<size_t> max_value_bytes(const ir::Value& v) {
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
  if (n > std::numeric_limits<size_t>::max() - kArenaAlignment) return std::nullopt;
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

bool is_view_op(const ir::Node& node) {
  return ops::traits_of(node).view && node.outputs().size() == 1;
}

std::vector<size_t> in_place_inputs(const ir::Node& node) {
  if (!node.domain().empty() || node.outputs().size() != 1) return {};
  static const std::set<std::string> kUnary = {
      "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh",
      "Elu",  "Gelu",      "Exp",  "Sqrt",        "Abs",       "Neg",     "Mish"};
  static const std::set<std::string> kCommutative = {"Add", "Mul"};
  static const std::set<std::string> kOrdered = {"Sub", "Div"};
  const std::string& op = node.op_type();
  if (kUnary.count(op)) return {0};
  if (kCommutative.count(op)) return {0, 1};
  if (kOrdered.count(op)) return {0};
  return {};
}

namespace {

// In place needs the same bytes for both: same type and shape (and, through the executor's
// uniform layout rule, the same layout).
bool same_type(const ir::Value& a, const ir::Value& b) {
  const TypeInfo& x = a.type();
  const TypeInfo& y = b.type();
  return x.is_tensor() && y.is_tensor() && x.dtype == y.dtype && x.shape && y.shape &&
         x.shape->to_string() == y.shape->to_string();
}

}  // namespace

MemoryPlan plan_memory(const ir::Graph& graph, const PlanOptions& options) {
  MemoryPlan plan;
  const std::vector<ir::Node*> nodes = graph.nodes();
  const auto uses = graph.compute_uses();
  std::map<const ir::Node*, size_t> step;
  for (size_t i = 0; i < nodes.size(); ++i) step[nodes[i]] = i;

  auto last_use = [&](const ir::Value* v, size_t produced) {
    size_t last = produced;
    auto it = uses.find(v);
    if (it != uses.end()) {
      for (const ir::Node* reader : it->second) last = std::max(last, step.at(reader));
    }
    if (graph.is_output(v)) last = nodes.size();
    return last;
  };

  // Slots: values sharing one are planned as one buffer spanning all their lifetimes.
  struct Slot {
    size_t bytes = 0, first = 0, last = 0;
    size_t offset = 0;
  };
  std::vector<Slot> slots;
  std::map<const ir::Value*, size_t> slot_of;  // planned value -> slot
  std::vector<size_t> buffer_slot;

  auto add_buffer = [&](const ir::Value* v, size_t bytes, size_t first, size_t last,
                        const ir::Value* shares) {
    size_t s;
    if (shares) {
      s = slot_of.at(shares);
      slots[s].bytes = std::max(slots[s].bytes, bytes);
      slots[s].last = std::max(slots[s].last, last);
      ++plan.shared;
    } else {
      s = slots.size();
      slots.push_back({bytes, first, last, 0});
    }
    slot_of[v] = s;
    plan.buffers.push_back({v, 0, bytes, first, last, shares});
    buffer_slot.push_back(s);
    plan.naive_bytes += bytes;
  };

  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    const bool arena = !options.writes_arena || options.writes_arena(n);
    for (size_t k = 0; k < n.outputs().size(); ++k) {
      const ir::Value* v = n.output(k);
      if (!v) continue;
      if (!options.plan_graph_outputs && graph.is_output(v)) continue;
      std::optional<size_t> bytes =
          options.value_bytes ? options.value_bytes(*v) : max_value_bytes(*v);
      if (!bytes) {
        plan.unplanned.push_back(v);
        continue;
      }
      if (!arena) continue;
      const size_t last = last_use(v, i);
      const ir::Value* shares = nullptr;
      if (options.in_place && is_view_op(n)) {
        // A view of memory that lives elsewhere (a feed, a weight, a heap value) needs no slot.
        if (!n.input(0) || !slot_of.count(n.input(0))) continue;
        shares = n.input(0);
      } else if (options.in_place) {
        for (size_t in : in_place_inputs(n)) {
          const ir::Value* x = n.input(in);
          if (!x || !slot_of.count(x) || !same_type(*x, *v)) continue;
          // The slot must be dead after this node, and no other input may read it here.
          const size_t s = slot_of.at(x);
          bool other_reader = false;
          for (const ir::Value* other : n.inputs()) {
            other_reader |= other && other != x && slot_of.count(other) && slot_of.at(other) == s;
          }
          if (slots[s].last <= i && !other_reader) {
            shares = x;
            break;
          }
        }
      }
      add_buffer(v, *bytes, i, last, shares);
    }
  }

  // Greedy by size (largest first): each slot takes the lowest offset that does not overlap any
  // already placed slot whose lifetime intersects its own.
  std::vector<size_t> order(slots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return slots[a].bytes > slots[b].bytes; });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    Slot& slot = slots[idx];
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of live-overlapping slots
    for (size_t p : placed) {
      const Slot& o = slots[p];
      if (o.first <= slot.last && slot.first <= o.last)
        busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (offset + slot.bytes <= start) break;
      offset = std::max(offset, end);
    }
    slot.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + slot.bytes);
    placed.push_back(idx);
  }
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const Slot& s = slots[buffer_slot[b]];
    plan.buffers[b].offset = s.offset;
    plan.buffers[b].first_step = s.first;
    plan.buffers[b].last_step = s.last;
  }
  return plan;
}

}  // namespace kiln::runtime
