#pragma once
// kiln::Session: the one way to run a model. Opens a .kiln engine (mmapped) or an ONNX model
// (imported and optimized at open), checks feeds against the declared inputs (element type, rank,
// static dims, symbolic dims within their declared ranges) and runs them. The CLI, the C ABI, the
// Python package and the server all go through this class.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/rt_value.hpp"
#include "core/type_info.hpp"
#include "engine/engine_file.hpp"
#include "ir/model.hpp"
#include "runtime/executor.hpp"
#include "runtime/executor_pool.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/model_loader.hpp"

namespace kiln {

// The most executors one session keeps for overlapping runs (SessionOptions::parallel_runs), and
// the most the automatic choice picks.
inline constexpr int kMaxParallelRuns = 64;
inline constexpr int kAutoParallelRuns = 8;

struct SessionOptions {
  int threads = 0;         // intra-op threads; 0: one per core
  bool profiling = false;  // keep per-node timings of the last run
  // Devices to place nodes on, preferred first ("cpu", "gpu", "gpu,cpu";
  // backends/backend_registry.hpp); the CPU runs what the others cannot. Unknown: Unsupported;
  // known but absent: Unavailable.
  std::string device = "cpu";
  bool optimize = true;  // ONNX models: run the default passes at open
  // Runs of one session from several threads overlap on up to this many executors (each with its
  // own activation memory and kernel copies, made only when a run finds the others busy;
  // runtime/executor_pool.hpp). 0: as many runs of `threads` threads as the process's CPUs hold,
  // at most 8 (so 1 when `threads` is 0, one per core: runs then take turns using every core);
  // 1 on a device and when profiling. Config entry "parallel_runs" sets it too.
  int parallel_runs = 0;
  // Rare knobs, as a string bag (ORT's session config entries play the same role).
  // "executor": "interpreter" runs every node on the reference interpreter (the oracle) instead
  // of the executor's prepared kernels.
  std::map<std::string, std::string> config;
};

struct IoInfo {
  std::string name;
  TypeInfo type;  // element type and shape; symbolic dims carry their declared range
};

class Session {
 public:
  // Opens an engine file or an ONNX model; throws kiln::Error naming the file on failure.
  explicit Session(const std::string& path, SessionOptions options = {});
  explicit Session(ir::Model model, SessionOptions options = {});
  // What runtime::load_model or load_model_bytes read: an engine keeps its stamp and stored plan.
  explicit Session(runtime::LoadedModel loaded, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::vector<IoInfo>& inputs() const { return inputs_; }
  const std::vector<IoInfo>& outputs() const { return outputs_; }
  const SessionOptions& options() const { return options_; }
  // The model as it runs. An engine's weights stored only packed are unpacked first, so whatever
  // reads the graph (the reference interpreter, a drift search) sees every constant.
  const ir::Model& model() const;
  // How many of the engine's weights stored only packed still have no plain form in memory.
  size_t weights_left_packed() const;
  // Set when the session was opened from an engine file.
  const std::optional<engine::EngineInfo>& engine_info() const { return engine_; }

  // Runs with feeds by name and returns the named outputs in the order asked (all outputs in
  // graph order when `output_names` is empty), like onnxruntime's InferenceSession.run. Throws
  // InvalidArgument for a missing, unknown or mismatched feed and NotFound for an unknown output.
  // Safe to call from several threads; runs overlap up to options.parallel_runs. `control`, when
  // given, bounds the run: it stops between plan steps and Loop / Scan iterations with
  // runtime::RunStopped once past its deadline or cancelled.
  std::vector<RtValue> run(const std::vector<std::string>& output_names,
                           const std::map<std::string, RtValue>& feeds,
                           const runtime::RunControl* control = nullptr);
  // All outputs by name.
  std::map<std::string, RtValue> run(const std::map<std::string, RtValue>& feeds,
                                     const runtime::RunControl* control = nullptr);

  // Per-node timings of the last run (empty unless options.profiling).
  std::vector<runtime::NodeTiming> last_profile() const;
  // The executor running the model (null when config "executor" is "interpreter").
  // With overlapping runs, the one a lone thread runs on.
  const runtime::Executor* executor() const {
    return executors_ ? &executors_->first() : executor_.get();
  }
  // Executors made so far for overlapping runs, and the most there may be (0, 0 on the
  // interpreter).
  size_t executors_made() const { return executors_ ? executors_->size() : 0; }
  size_t parallel_run_limit() const { return executors_ ? executors_->limit() : 0; }

 private:
  void init();
  void build_executor(std::vector<backends::Backend*> backends);
  // Wraps the executor in the pool for overlapping runs.
  void make_executor_pool(std::vector<backends::Backend*> backends);
  // True when every node reading a deferred weight runs on the kernel the engine packed it for.
  bool only_packing_kernels_read_deferred() const;
  void unpack_deferred() const;

  SessionOptions options_;
  ir::Model model_;
  std::optional<engine::EngineInfo> engine_;
  std::optional<engine::ExecutionPlan> plan_;  // an engine's stored plan, used at init
  // Weights the engine stores only packed whose plain form is not filled yet: only the kernels
  // that packed them read them (engine/packed_layout.hpp).
  mutable std::vector<engine::DeferredWeight> deferred_;
  mutable std::mutex deferred_mutex_;
  std::vector<IoInfo> inputs_, outputs_;
  std::unique_ptr<runtime::Executor> executor_;       // while opening; then the pool's first
  std::unique_ptr<runtime::ExecutorPool> executors_;  // after opening
  std::unique_ptr<runtime::Interpreter> interpreter_;
  mutable std::mutex run_mutex_;
};

}  // namespace kiln
