#pragma once
// The executor: runs a model's main graph by its execution plan (execution_plan.hpp), which
// placement (placement.hpp) and planning decided once at construction. A run only binds feeds,
// runs the planned steps (kernels, views, interpreter nodes, copies) and hands the outputs out.
//
// Activations live in their device's arena at their planned offsets. Values of unbounded size
// get memory of their own, the same buffer run after run once nothing else holds it. Graph
// outputs get memory of their own, and any result that would alias the arena past its space's
// lifetime is copied out, so a returned tensor never changes when the next run reuses the arena.
#include <chrono>
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
#include "runtime/execution_plan.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/placement.hpp"
#include "runtime/replay_segments.hpp"

namespace kiln::runtime {

struct ExecutorOptions {
  int threads = 0;  // intra-op threads; 0: one per core
  // Backends in order of preference. The CPU backend is appended when absent: it runs every
  // node a preferred backend cannot.
  std::vector<backends::Backend*> backends;
  // Record each stretch of device kernels once and replay it while its inputs' pointers and
  // dims stay the same (CUDA / HIP graphs; runtime/replay_segments.hpp). The environment
  // variable KILN_DEVICE_GRAPHS=0 turns it off too, to measure what it gains.
  bool replay_device_work = true;
};

class Executor {
 public:
  // Places, plans and prepares `graph`. With `stored` (an engine's plan), its kernel choices and
  // memory plan are used as they are, after checking each space is big enough for its value; a
  // choice naming a kernel this build lacks is chosen afresh with a warning.
  Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions options = {},
           const engine::ExecutionPlan* stored = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Inputs in the graph's input order; an input left None falls back to its initializer (or is
  // an absent optional). Runs are serialized. `control`, when given, is checked before every
  // step and every subgraph run (RunStopped when past its deadline or cancelled).
  std::vector<RtValue> run(const std::vector<RtValue>& inputs, const RunControl* control = nullptr);

  // Per-node timings of the last run (copies are not nodes: their time is not listed). Steps
  // on a device are timed with its events.
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<NodeTiming>& last_profile() const { return profile_; }
  // Milliseconds the last run's device segments took on their devices (device events around
  // each; 0 when nothing ran on a device or when profiling).
  double last_device_ms() const { return last_device_ms_; }
  // Segments the last run replayed, and the plan's recordable segments (found, and timed, even
  // when replay is off).
  size_t last_replayed_segments() const { return last_replayed_; }
  size_t replay_segment_count() const { return segments_.size(); }

  const ir::Graph& graph() const { return *graph_; }
  const ExecutionPlan& plan() const { return *plan_; }
  const std::vector<KernelChoice>& kernel_choices() const { return plan_->placement().choices; }
  using ArenaSummary = runtime::ArenaSummary;
  const std::vector<ArenaSummary>& arena_summaries() const { return plan_->summaries(); }
  // Arena bytes per device name.
  std::map<std::string, size_t> arena_bytes() const;
  // The channel block of `v`'s layout between fast kernels (0: row-major; see
  // runtime/layout_plan.hpp).
  int layout_block(const ir::Value* v) const;
  // The plan as an engine file stores it (kernel choices and arenas).
  engine::ExecutionPlan execution_plan() const { return plan_->to_stored(); }
  // The constant inputs kernels computed packed copies of, for the engine (compile time).
  std::vector<engine::StoredPackedWeight> pack_weights() { return plan_->pack_weights(); }
  // What the kernels timed on their devices in the runs so far, for the engine (compile time).
  std::vector<engine::StoredTactics> tactics() const { return plan_->tactics(); }

 private:
  // A value during a run and the backend whose memory holds it.
  struct LiveValue {
    RtValue value;
    backends::Backend* device = nullptr;
  };
  // The buffer a value without arena space got last run, taken again when nothing holds it.
  struct SpareBuffer {
    backends::Backend* backend = nullptr;
    std::shared_ptr<backends::DeviceBuffer> buffer;
  };
  class Outputs;
  class Run;
  // A replay segment's recording and what it saw, kept across runs.
  struct ReplayState {
    std::vector<std::pair<const void*, std::vector<int64_t>>> key;  // its reads when last run
    bool seen = false;                                              // run once eagerly with `key`
    bool disabled = false;
    std::unique_ptr<backends::CapturedWork> work;
    std::vector<std::pair<int, LiveValue>> saved;  // its outputs, as the recording left them
    std::unique_ptr<backends::Event> begin, end;   // device time of its last run
  };

  // Runs plan step `i` as usual (profiled when profiling); `release` drops its dead values.
  void run_step(Run& run, std::vector<LiveValue>& values, size_t i, bool release);
  // Runs segment `s` (steps first..last): replays its recording when its reads are as
  // recorded, records it on the second run with the same reads, else runs it step by step.
  void run_segment(Run& run, std::vector<LiveValue>& values, size_t s);

  backends::Stream& stream_for(backends::Backend* backend);
  // Memory for plan value `v` in `device`'s memory: its arena space, else a buffer of its own
  // (last run's when free). `host_for`, when given, is the device a host value is copied off:
  // its buffer then comes from that device's allocate_host (page-locked on a GPU).
  Tensor allocate_value(int v, backends::Backend* device, DataType dtype, std::vector<int64_t> dims,
                        backends::Backend* host_for = nullptr);

  std::shared_ptr<const ir::Graph> graph_;
  ExecutorOptions options_;
  std::unique_ptr<ExecutionPlan> plan_;
  std::vector<SpareBuffer> spare_;            // by plan value
  std::unique_ptr<Interpreter> interpreter_;  // for nodes with subgraphs; null when none
  std::map<backends::Backend*, std::unique_ptr<backends::Stream>> streams_;
  bool profiling_ = false;
  std::vector<NodeTiming> profile_;
  std::vector<ReplaySegment> segments_;
  std::vector<ReplayState> replay_;
  std::vector<int> segment_at_;  // by plan step: the segment starting there, or -1
  bool replay_enabled_ = true;
  double last_device_ms_ = 0;
  size_t last_replayed_ = 0;
  std::mutex run_mutex_;
};

}  // namespace kiln::runtime
