#pragma once
// The executor: runs a model's main graph with kernels prepared once. At construction each node
// gets a backend and a kernel (the fast kernel of the first backend that supports it, else the
// CPU reference kernel; a node another backend cannot run falls back to the CPU with explicit
// copies and one warning per op type), kernels are created (weights prepared there), and each
// device gets one arena, sized by the static memory plan for the declared maximum shapes.
// Weights an engine stores packed (kiln compile) are handed to their kernels before layouts are
// set. A run only binds feeds, runs the steps and hands the outputs out.
//
// Activations live in the arena at their planned offsets; views and in-place element-wise ops
// share slots as the plan says. Values of unbounded size get memory of their own, the same
// buffer run after run once nothing else holds it. Graph outputs get memory of their own, and any
// result that would alias the arena past its slot's lifetime is copied out, so a returned tensor
// never changes when the next run reuses the arena. Nodes with subgraphs (If, Loop, Scan) and
// sequence or optional values run on the reference interpreter's path.
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/rt_value.hpp"
#include "engine/engine_file.hpp"
#include "ir/graph.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/memory_planner.hpp"

namespace kiln::runtime {

// Kernel names the executor itself implements on the host (not in any backend's table).
inline constexpr const char* kReferenceKernel = "reference";
inline constexpr const char* kViewKernel = "view";

struct KernelChoice {
  std::string backend;  // a backend name ("cpu")
  std::string kernel;   // a kernel of that backend's table, "reference" or "view"
};

struct ExecutorOptions {
  int threads = 0;  // intra-op threads; 0: one per core
  // Backends in order of preference. The CPU backend is appended when absent: it runs every
  // node a preferred backend cannot.
  std::vector<backends::Backend*> backends;
};

// The kernel for each node of `graph`'s main graph, in node order.
std::vector<KernelChoice> choose_kernels(const ir::Graph& graph,
                                         std::span<backends::Backend* const> backends);

class Executor {
 public:
  // Plans and prepares `graph`. With `stored` (an engine's plan), its kernel choices and memory
  // plan are used as they are, after checking each slot is big enough for its value; a choice
  // naming a kernel this build lacks is chosen afresh with a warning.
  Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions options = {},
           const engine::ExecutionPlan* stored = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Inputs in the graph's input order; an input left None falls back to its initializer (or is
  // an absent optional). Runs are serialized. `control`, when given, is checked before every
  // step and every subgraph run (RunStopped when past its deadline or cancelled).
  std::vector<RtValue> run(const std::vector<RtValue>& inputs, const RunControl* control = nullptr);

  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<NodeTiming>& last_profile() const { return profile_; }

  const ir::Graph& graph() const { return *graph_; }
  const std::vector<KernelChoice>& kernel_choices() const { return choices_; }
  // One line of memory-plan figures per device arena.
  struct ArenaSummary {
    std::string device;
    size_t bytes = 0;        // the arena
    size_t naive_bytes = 0;  // every planned value in its own buffer
    size_t values = 0;       // values with a slot
    size_t shared = 0;       // of which reuse another's slot in place or as views
    size_t unplanned = 0;    // values of unbounded size, allocated per run
    bool from_engine = false;
  };
  const std::vector<ArenaSummary>& arena_summaries() const { return summaries_; }
  // Arena bytes per device name.
  std::map<std::string, size_t> arena_bytes() const;
  // The channel block of `v`'s layout between fast kernels (0: row-major; see
  // runtime/layout_plan.hpp).
  int layout_block(const ir::Value* v) const;
  // The plan as an engine file stores it (kernel choices and arenas).
  engine::ExecutionPlan execution_plan() const;
  // The constant inputs kernels computed packed copies of, for the engine (compile time).
  std::vector<engine::StoredPackedWeight> pack_weights();

 private:
  struct Step;
  struct Arena;
  struct Slot;
  struct PlannedSlot {
    int arena = -1;  // index in arenas_, -1: no slot
    size_t offset = 0, size = 0;
  };
  class Outputs;
  class Run;

  void choose(const engine::ExecutionPlan* stored);
  void plan_arenas(const engine::ExecutionPlan* stored);
  void prepare_steps();
  void plan_layouts(const engine::ExecutionPlan* stored);
  void use_packed_weights(const engine::ExecutionPlan* stored);
  backends::Backend* backend_named(const std::string& name) const;
  backends::Stream& stream_for(backends::Backend* backend);
  int value_index(const ir::Value* v) const;

  std::shared_ptr<const ir::Graph> graph_;
  ExecutorOptions options_;
  std::vector<const ir::Node*> nodes_;
  std::vector<KernelChoice> choices_;
  std::vector<const ir::Value*> values_;  // every main-graph value, by index
  std::map<const ir::Value*, int> index_;
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::vector<PlannedSlot> planned_;  // by value index
  std::vector<int> block_;            // by value index: channel block of its layout, 0 row-major
  std::vector<ArenaSummary> summaries_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<RtValue> constants_;  // by value index: initializers' data (None otherwise)
  // By value index: the buffer a value without an arena slot got last run, reused when free.
  struct Spare {
    backends::Backend* backend = nullptr;
    std::shared_ptr<backends::DeviceBuffer> buffer;
  };
  std::vector<Spare> spare_;
  std::unique_ptr<Interpreter> interpreter_;  // for nodes with subgraphs; null when none
  std::map<backends::Backend*, std::unique_ptr<backends::Stream>> streams_;
  bool profiling_ = false;
  std::vector<NodeTiming> profile_;
  std::mutex run_mutex_;
};

}  // namespace kiln::runtime
