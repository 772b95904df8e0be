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
#include "runtime/interpreter.hpp"
#include "runtime/model_loader.hpp"

namespace kiln {

struct SessionOptions {
  int threads = 0;         // intra-op threads; 0: one per core
  bool profiling = false;  // keep per-node timings of the last run
  // Devices to place nodes on, preferred first ("cpu", "gpu", "gpu,cpu";
  // backends/backend_registry.hpp); the CPU runs what the others cannot. Unknown: Unsupported;
  // known but absent: Unavailable.
  std::string device = "cpu";
  bool optimize = true;  // ONNX models: run the default passes at open
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
  const ir::Model& model() const { return model_; }
  // Set when the session was opened from an engine file.
  const std::optional<engine::EngineInfo>& engine_info() const { return engine_; }

  // Runs with feeds by name and returns the named outputs in the order asked (all outputs in
  // graph order when `output_names` is empty), like onnxruntime's InferenceSession.run. Throws
  // InvalidArgument for a missing, unknown or mismatched feed and NotFound for an unknown output.
  // Safe to call from several threads; runs of one session are serialized. `control`, when
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
  const runtime::Executor* executor() const { return executor_.get(); }

 private:
  void init();

  SessionOptions options_;
  ir::Model model_;
  std::optional<engine::EngineInfo> engine_;
  std::optional<engine::ExecutionPlan> plan_;  // an engine's stored plan, used at init
  std::vector<IoInfo> inputs_, outputs_;
  std::unique_ptr<runtime::Executor> executor_;
  std::unique_ptr<runtime::Interpreter> interpreter_;
  mutable std::mutex run_mutex_;
};

}  // namespace kiln
