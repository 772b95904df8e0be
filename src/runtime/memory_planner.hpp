#pragma once
// Static activation memory plan: every intermediate tensor of the main graph whose size is bounded
// (static dims, or symbolic dims with a declared maximum) gets an offset into one arena, reusing
// the space of tensors that are dead by the time it is produced. Planned once for the maximum
// shapes; values of unbounded size stay dynamically allocated and are listed.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::runtime {

inline constexpr size_t kArenaAlignment = 64;

struct PlannedBuffer {
  const ir::Value* value = nullptr;
  size_t offset = 0;
  size_t bytes = 0;       // rounded up to kArenaAlignment
  size_t first_step = 0;  // index of the producing node
  size_t last_step = 0;   // index of the last reading node (end of graph for outputs)
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;
  size_t arena_bytes = 0;                   // the arena size the plan needs
  size_t naive_bytes = 0;                   // sum of all planned buffers, as if none shared space
  std::vector<const ir::Value*> unplanned;  // sizes not bounded statically
};

MemoryPlan plan_memory(const ir::Graph& graph);

}  // namespace kiln::runtime
