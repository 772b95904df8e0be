#pragma once
// The execution plan: everything a run does, decided once when a model is opened, from a
// placement (placement.hpp). It holds
// - the steps in order: each node's kernel, view or interpreter step, and Copy steps where a
//   value produced in one device's memory is read in another's: one copy per value and reading
//   device, placed before its first reader there and shared by every reader there (graph
//   outputs that end on a device get one copy to the host after the last step);
// - the constants each device reads, uploaded once here, never per run;
// - the layout of every value between fast kernels (runtime/layout_plan.hpp);
// - one arena per device, every bounded value at a planned offset, sized for the declared
//   maximum shapes, with in-place reuse where the chosen kernel declares it and views sharing
//   their input's space (runtime/memory_planner.hpp);
// - the engine round trip: the kernel choices and arenas an engine file stores, read back and
//   checked (each stored space big enough for its value), and the packed weights.
// The executor (executor.hpp) only binds feeds, runs these steps and hands outputs out.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "core/rt_value.hpp"
#include "engine/engine_file.hpp"
#include "ir/graph.hpp"
#include "runtime/placement.hpp"

namespace kiln::runtime {

// A value of the plan: a main-graph value in the memory it is produced in, or a copy of one in
// another device's memory.
struct PlanValue {
  const ir::Value* value = nullptr;
  backends::Backend* device = nullptr;  // whose memory holds it (the CPU backend: host memory)
  int copy_of = -1;                     // a copy: the plan value it copies
};

// Where a value lives in its device's arena; arena -1: no space (allocated when produced).
struct ArenaRange {
  int arena = -1;
  size_t offset = 0, size = 0;
};

struct PlanStep {
  StepKind kind = StepKind::Interpreter;
  const ir::Node* node = nullptr;  // null for Copy
  size_t node_index = 0;           // the node's index in the graph (not for Copy)
  // Kernel: where it runs. Copy: the device whose stream carries it (the non-host side).
  backends::Backend* backend = nullptr;
  std::unique_ptr<backends::Kernel> kernel;  // Kernel only
  const ops::OpDef* def = nullptr;           // View, Interpreter
  std::vector<int> inputs, outputs;          // plan values in slot order, -1 for an empty slot
  // Interpreter steps with subgraphs: the host plan value each captured outer value is read as.
  std::vector<std::pair<const ir::Value*, int>> captures;
  std::vector<int> release;  // plan values dead after this step
};

struct DeviceArena {
  backends::Backend* backend = nullptr;
  size_t bytes = 0;
  std::shared_ptr<backends::DeviceBuffer> buffer;  // shared with the tensor views over it
  char* base() const { return buffer ? static_cast<char*>(buffer->data()) : nullptr; }
  bool contains(const void* p) const {
    auto* c = static_cast<const char*>(p);
    return buffer && c >= base() && c < base() + bytes;
  }
};

// One line of memory-plan figures per device arena.
struct ArenaSummary {
  std::string device;
  size_t bytes = 0;        // the arena
  size_t naive_bytes = 0;  // every planned value in its own buffer
  size_t values = 0;       // values with a space
  size_t shared = 0;       // of which reuse another's space in place or as views
  size_t unplanned = 0;    // values of unbounded size, allocated per run
  bool from_engine = false;
};

class ExecutionPlan {
 public:
  // Plans `placement` for `graph`. With `stored` (an engine's plan), its arenas are used as they
  // are after checking each space is big enough for its value, and its packed weights are handed
  // to their kernels.
  ExecutionPlan(std::shared_ptr<const ir::Graph> graph, Placement placement,
                const engine::ExecutionPlan* stored);
  ExecutionPlan(const ExecutionPlan&) = delete;
  ExecutionPlan& operator=(const ExecutionPlan&) = delete;

  const ir::Graph& graph() const { return *graph_; }
  const Placement& placement() const { return placement_; }
  std::vector<PlanStep>& steps() { return steps_; }
  const std::vector<PlanStep>& steps() const { return steps_; }
  const std::vector<PlanValue>& values() const { return values_; }
  // By plan value: an initializer's data (host), its upload to a device, or None.
  const std::vector<RtValue>& constants() const { return constants_; }
  // An upload of an initializer that is also a graph input: a run that feeds that input
  // replaces it (its Copy step copies the feed); other runs read the upload.
  bool overridable_upload(int v) const {
    return v >= 0 && values_[v].copy_of >= 0 && !constants_[v].is_none() &&
           graph_->is_input(values_[v].value);
  }
  const std::vector<ArenaRange>& ranges() const { return ranges_; }
  // By plan value: its layout (row-major, or channel-blocked between the kernels that agreed).
  const std::vector<backends::Layout>& layouts() const { return layouts_; }
  std::vector<DeviceArena>& arenas() { return arenas_; }
  const std::vector<DeviceArena>& arenas() const { return arenas_; }
  const std::vector<ArenaSummary>& summaries() const { return summaries_; }
  // The plan value of a main-graph value where it is produced (or fed); -1 when not in the graph.
  int value_index(const ir::Value* v) const;
  // By graph output: the host plan value handed out.
  const std::vector<int>& results() const { return results_; }
  // Device uploads made at open (one per constant and reading device).
  size_t uploads() const { return uploads_; }

  // The plan as an engine file stores it (kernel choices and arenas).
  engine::ExecutionPlan to_stored() const;
  // The constant inputs kernels computed packed copies of, for the engine (compile time).
  std::vector<engine::StoredPackedWeight> pack_weights();
  // What the kernels timed on their devices so far (compile time, after a tuning run).
  std::vector<engine::StoredTactics> tactics() const;

 private:
  void build_steps();
  int need_in(int v, backends::Backend* device);
  void compute_releases();
  void use_packed_weights(const engine::ExecutionPlan* stored);
  void use_tactics(const engine::ExecutionPlan* stored);
  void plan_layouts(const engine::ExecutionPlan* stored);
  void plan_arenas(const engine::ExecutionPlan* stored);
  void upload_constants();
  backends::Backend* host() const;

  std::shared_ptr<const ir::Graph> graph_;
  Placement placement_;
  std::vector<PlanStep> steps_;
  std::vector<size_t> node_steps_;  // by node index: its step
  std::vector<PlanValue> values_;
  std::map<const ir::Value*, int> index_;
  std::map<std::pair<int, backends::Backend*>, int> copies_;  // (value, device) -> its copy
  std::vector<int> uploads_pending_;                          // plan values to upload
  std::vector<RtValue> constants_;
  std::vector<ArenaRange> ranges_;
  std::vector<backends::Layout> layouts_;
  std::vector<DeviceArena> arenas_;
  std::vector<ArenaSummary> summaries_;
  std::vector<int> results_;
  size_t uploads_ = 0;
};

}  // namespace kiln::runtime
