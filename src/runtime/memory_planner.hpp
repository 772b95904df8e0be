#pragma once
// Static activation memory plan: every intermediate tensor of the main graph whose size is bounded
// (static dims, or symbolic dims with a declared maximum) gets an offset into one arena, reusing
// the space of tensors that are dead by the time it is produced. Planned once for the maximum
// shapes; values of unbounded size stay dynamically allocated and are listed.
//
// With in-place reuse on, a value shares the slot of one of its producer's inputs where the op
// allows it: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) always, since their output
// is their input's bytes; element-wise ops when the input dies at that node and has the output's
// type and shape, since each output element only reads the input element at its own index.
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::runtime {

inline constexpr size_t kArenaAlignment = 64;

struct PlannedBuffer {
  const ir::Value* value = nullptr;
  size_t offset = 0;
  size_t bytes = 0;       // rounded up to kArenaAlignment
  size_t first_step = 0;  // index of the producing node (of the first value of its slot)
  size_t last_step = 0;   // index of the last reading node (end of graph for outputs)
  // The value whose slot this one reuses in place or views; nullptr for a slot of its own.
  const ir::Value* shares = nullptr;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;
  size_t arena_bytes = 0;                   // the arena size the plan needs
  size_t naive_bytes = 0;                   // sum of all planned buffers, as if none shared space
  std::vector<const ir::Value*> unplanned;  // sizes not bounded statically
  size_t shared = 0;                        // buffers that reuse another's slot (in place, views)
};

struct PlanOptions {
  bool in_place = false;
  // Graph outputs get arena slots too; off when the executor hands outputs out in their own
  // memory (so a returned tensor never aliases an arena reused by the next run).
  bool plan_graph_outputs = true;
  // Nodes whose outputs live in the arena; the others (run where their kernel allocates, or on
  // another device) get no slot. Default: every node.
  std::function<bool(const ir::Node&)> writes_arena;
  // Bytes a value needs (a blocked layout pads channels); default max_value_bytes.
  std::function<std::optional<size_t>(const ir::Value&)> value_bytes;
};

MemoryPlan plan_memory(const ir::Graph& graph, const PlanOptions& options = {});

// Upper bound of a value's size in bytes (rounded up to kArenaAlignment), or nullopt when some
// dim has no bound or the value is not a numeric tensor.
std::optional<size_t> max_value_bytes(const ir::Value& v);

// Ops whose output is input 0's bytes under other dims.
bool is_view_op(const ir::Node& node);
// Input slots whose memory an element-wise op may overwrite with its output (same index
// mapping), best first; empty for other ops.
std::vector<size_t> in_place_inputs(const ir::Node& node);

}  // namespace kiln::runtime
