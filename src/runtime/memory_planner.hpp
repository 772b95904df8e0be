#pragma once
// Static activation memory plan: every intermediate tensor whose size is bounded (static dims, or
// symbolic dims with a declared maximum) gets an offset into one arena, reusing the space of
// tensors that are dead by the time it is produced. Planned once for the maximum shapes; values
// of unbounded size stay dynamically allocated and are listed.
//
// The planner works on steps (plan_step_memory): the execution plan's kernel, view and copy
// steps of one device. With in-place reuse on, a value shares the space of one of its producer's
// inputs where the step allows it: a view's output is its input's bytes; a kernel overwrites an
// input only where the kernel itself declares it (KernelDef::in_place_inputs), the input dies at
// that step and has the output's type and shape. plan_memory runs the same planner over a graph's
// nodes (views only, unless the caller says which inputs each node may overwrite).
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::runtime {

inline constexpr size_t kArenaAlignment = 64;

// One step as the planner sees it; values are indices into the planner's value list.
struct MemoryStep {
  std::vector<int> inputs;   // operands in slot order, -1 for an empty one
  std::vector<int> outputs;  // -1 for an empty one
  std::vector<int> reads;    // everything the step reads (subgraph captures too): lifetimes
  bool writes_arena = true;  // its outputs get space in this arena
  bool view = false;         // output 0 is input 0's bytes under other dims
  // Input slots whose space output 0 may take (declared by the step's kernel), best first.
  std::vector<size_t> in_place;
};

struct MemoryValue {
  std::optional<size_t> bytes;  // rounded up to kArenaAlignment; nullopt: unbounded
  bool planned = true;          // false: never gets space (handed out in memory of its own)
  bool live_to_end = false;     // read after the last step (a graph output)
  std::string type_key;         // in place needs equal keys (element type and shape)
};

struct PlacedValue {
  size_t offset = 0;
  size_t bytes = 0;
  size_t first_step = 0;  // index of the producing step (of the first value of its space)
  size_t last_step = 0;   // index of the last reading step (steps.size() for live_to_end)
  int shares = -1;        // the value whose space this one takes in place or views
};

struct StepMemoryPlan {
  std::vector<std::optional<PlacedValue>> placed;  // by value index
  size_t arena_bytes = 0;
  size_t naive_bytes = 0;      // every placed value in space of its own
  size_t shared = 0;           // placed values that take another's space
  std::vector<int> unplanned;  // produced by an arena-writing step, size unbounded
};

StepMemoryPlan plan_step_memory(const std::vector<MemoryStep>& steps,
                                const std::vector<MemoryValue>& values);

// The graph form: steps are the graph's nodes in order.
struct PlannedBuffer {
  const ir::Value* value = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
  size_t first_step = 0;
  size_t last_step = 0;
  const ir::Value* shares = nullptr;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;
  size_t arena_bytes = 0;                   // the arena size the plan needs
  size_t naive_bytes = 0;                   // sum of all planned buffers, as if none shared space
  std::vector<const ir::Value*> unplanned;  // sizes not bounded statically
  size_t shared = 0;                        // buffers that reuse another's space (in place, views)
};

struct PlanOptions {
  bool in_place = false;  // views share their input's space; see in_place_inputs
  // With in_place: the inputs a node may overwrite with its output 0 (none when unset).
  std::function<std::vector<size_t>(const ir::Node&)> in_place_inputs;
  // Graph outputs get arena space too; off when outputs are handed out in memory of their own.
  bool plan_graph_outputs = true;
};

MemoryPlan plan_memory(const ir::Graph& graph, const PlanOptions& options = {});

// Whether `v` is a tensor of a known rank and a fixed-size element type (what an arena can hold).
bool is_sized_tensor(const ir::Value& v);
// Upper bound of a value's size in bytes (rounded up to kArenaAlignment), or nullopt when some
// dim has no bound or the value is not a numeric tensor.
std::optional<size_t> max_value_bytes(const ir::Value& v);
// What in-place reuse compares: element type and shape ("" for a non-tensor).
std::string memory_type_key(const ir::Value& v);

// Ops whose output is input 0's bytes under other dims.
bool is_view_op(const ir::Node& node);

}  // namespace kiln::runtime
