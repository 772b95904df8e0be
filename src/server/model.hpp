#pragma once
// One loaded version of one model: its final config, metadata, instances (Sessions inside the
// Scheduler) and statistics. Held by shared_ptr: the repository keeps the served versions, and
// every accepted request keeps its version alive until it completes, so unloading or replacing a
// version never drops a request in flight. The last owner hands the object to a reaper thread
// (see ModelRepository) so a version is never destroyed on one of its own worker threads.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/budget.hpp"
#include "server/ensemble_scheduler.hpp"
#include "server/infer_types.hpp"
#include "server/model_config.hpp"
#include "server/scheduler.hpp"
#include "server/sequence_batcher.hpp"
#include "server/statistics.hpp"

namespace kiln::server {

// Where to load a version from and with which config (already merged with any override).
struct ModelLoadSpec {
  std::string name;
  int64_t version = 0;
  std::string model_dir;     // <repository>/<name>
  std::string model_path;    // <model_dir>/<version>/<model file>, confined to the repository
  ModelConfig config;        // before auto-completion
  bool autocomplete = true;  // false with --strict-model-config / --disable-auto-complete-config
  MetricsOptions metrics;    // which latency metrics the version's statistics keep
  // The server's budget the version's instances and threads are reserved from (none: no limit).
  std::shared_ptr<ResourceBudget> budget;
  uint64_t request_timeout_us = 0;  // --request-timeout-ms: caps every request's run (0: none)
  std::shared_ptr<const std::atomic<bool>> cancel;  // set when a drain ends: running requests stop
  // Ensembles only: the composing models' versions (to check the steps at load and to run them).
  // The server's request memory: an ensemble's intermediate tensors and a sequence model's
  // states are leased from it.
  ModelResolver resolve;
  std::shared_ptr<MemoryBudget> request_memory;
};

// The instances and intra-op threads a config asks for (instance groups x counts x GPUs, times
// the intra_op_thread_count parameter, 0 meaning one per CPU). Throws InvalidArgument for a bad
// count, naming the model.
BudgetDemand budget_demand(const ModelConfig& config, const std::string& model);

struct TensorMetadata {
  std::string name;
  std::string datatype;        // KServe v2 datatype string
  std::vector<int64_t> shape;  // -1 for any size; leading -1 batch dim when batching
};

// The metadata of a config's inputs (or outputs): protocol datatypes, and -1 leading the shape
// when the model batches.
std::vector<TensorMetadata> tensor_metadata(const ModelConfig& config, bool inputs);

class ModelVersion {
 public:
  // Reserves the instances and threads from the budget, opens one Session per instance, completes
  // and validates the config and starts the workers; throws kiln::Error naming the model and
  // file on failure, having released whatever it took. An ensemble (platform "ensemble") holds
  // no instances: its steps are checked against the composing versions `spec.resolve` finds.
  explicit ModelVersion(ModelLoadSpec spec);
  ~ModelVersion();
  ModelVersion(const ModelVersion&) = delete;
  ModelVersion& operator=(const ModelVersion&) = delete;

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  const ModelConfig& config() const { return config_; }
  const std::string& platform() const { return config_.platform(); }
  const std::vector<TensorMetadata>& input_metadata() const { return input_metadata_; }
  const std::vector<TensorMetadata>& output_metadata() const { return output_metadata_; }
  int max_batch_size() const { return config_.max_batch_size(); }
  // The latency objective's state (sla_controller.hpp); nullopt without one.
  std::optional<SlaSnapshot> sla() const {
    return scheduler_ ? scheduler_->sla() : std::optional<SlaSnapshot>();
  }
  ModelStatistics& statistics() { return statistics_; }
  const ModelStatistics& statistics() const { return statistics_; }
  double load_seconds() const { return load_seconds_; }
  // 0 for a model; for an ensemble, 1 + the deepest nesting of the ensembles its steps run.
  int ensemble_depth() const { return ensemble_depth_; }
  // Returns the instances and threads to the budget: the repository calls it when the version
  // leaves the served set, while requests holding it may still finish.
  void release_budget() { lease_.release(); }

  // Runs the request through the scheduler (an ensemble's: through its steps); `self` must own
  // this version (it is kept alive until `done` has run). `done` is called exactly once.
  static void infer_async(const std::shared_ptr<ModelVersion>& self,
                          std::unique_ptr<InferRequest> request, InferCallback done);

 private:
  void load_model(ModelLoadSpec& spec);
  void load_ensemble(ModelLoadSpec& spec);  // model_ensemble.cpp

  std::string name_;
  int64_t version_ = 0;
  ModelConfig config_;
  std::vector<TensorMetadata> input_metadata_, output_metadata_;
  ModelStatistics statistics_;
  double load_seconds_ = 0;
  int ensemble_depth_ = 0;
  ResourceBudget::Lease lease_;  // before scheduler_: released after its threads end
  std::unique_ptr<EnsembleScheduler> ensemble_;  // an ensemble's (then scheduler_ is null)
  std::unique_ptr<Scheduler> scheduler_;         // a model's without sequence_batching
  // A sequence model's (then scheduler_ is null); last: its workers use the members above.
  std::unique_ptr<SequenceBatcher> sequence_;
};

}  // namespace kiln::server
