#pragma once
// The model repository and its manager: <repository>/<model>/config.pbtxt plus numeric version
// folders holding model.kiln (backend "kiln") or model.onnx (backend "onnxruntime", run through
// Kiln's ONNX path). Control modes as tritonserver's --model-control-mode:
//   none:     load everything at start; load/unload requests are refused.
//   poll:     load everything at start and rescan every poll interval (and on poll()):
//             new, changed and removed models and versions are loaded / unloaded.
//   explicit: load only --load-model names at start ("*" for all); load/unload on request.
// Every path is confined to the repository: names with "/", "..", or a leading ".", and
// symlinks resolving outside the repository are refused.
//
// A (re)load builds the new versions first and swaps them in only when all succeed; versions that
// leave the map stay alive for the requests holding them and are destroyed by a reaper thread.
//
// Ensembles (repository_ensembles.cpp), as tritonserver 2.51 handles them: loading one first loads
// the composing models it names that are not served (in every mode, explicit included); one
// whose composing models are missing, failed, lack a required version, form a cycle or nest
// deeper than kMaxEnsembleDepth is not loaded (the index lists it by name only, as a model never
// loaded, and the load answer and the log say why); unloading a model unloads the ensembles that
// use it, and reloading one checks them again.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/model.hpp"

namespace kiln::server {

enum class ModelControlMode { None, Poll, Explicit };
// "none" / "poll" / "explicit"; InvalidArgument otherwise.
ModelControlMode parse_model_control_mode(std::string_view text);

struct RepositoryOptions {
  std::vector<std::string> paths;  // --model-repository (one or more)
  ModelControlMode mode = ModelControlMode::None;
  std::vector<std::string> startup_models;  // --load-model (explicit mode); "*" loads all
  int poll_seconds = 15;                    // --repository-poll-secs
  bool autocomplete = true;                 // false: --strict-model-config=true
  MetricsOptions metrics;                   // --metrics-config: latency metrics per version
  size_t instance_budget = default_instance_budget();  // --model-instance-budget
  size_t thread_budget = default_thread_budget();      // --thread-budget
  uint64_t request_timeout_us = 0;                     // --request-timeout-ms (0: none)
  // The server's request memory budget, which ensembles lease their steps' tensors from.
  std::shared_ptr<MemoryBudget> request_memory;
  bool response_cache = false;  // --cache-config gave the server a response cache
};

// States as the repository index reports them.
// NotLoaded: in the repository but never loaded (or an ensemble refused before it had a
// version); Triton's index gives such a model no state.
enum class ModelState { Loading, Ready, Unloading, Unavailable, NotLoaded };
std::string_view model_state_name(ModelState state);  // "LOADING", "READY", ...; "" NotLoaded

struct RepositoryIndexEntry {
  std::string name;
  std::string version;  // empty for a model with no loaded version
  ModelState state = ModelState::Unavailable;
  std::string reason;  // why a load failed or the model was unloaded (not sent for NotLoaded)
};

class ModelRepository {
 public:
  explicit ModelRepository(RepositoryOptions options);
  // Stops polling, drops every version and waits for the reaper to destroy them (each finishing
  // its queued requests first).
  ~ModelRepository();
  ModelRepository(const ModelRepository&) = delete;
  ModelRepository& operator=(const ModelRepository&) = delete;

  // Initial load for the control mode; starts the poll thread in poll mode. Returns false when
  // some model failed to load (the server then reports not ready, as Triton does by default).
  bool start();

  // The version to run: `version` < 0 picks the highest ready version. Throws NotFound in
  // Triton's words: "Request for unknown model: 'm' is not found" for a name never loaded (an
  // ensemble refused at load included), "... has no available versions" for one that serves
  // nothing, "... version N is not found" for a version not served.
  std::shared_ptr<ModelVersion> get(std::string_view name, int64_t version = -1) const;
  bool model_ready(std::string_view name, int64_t version = -1) const;
  // The served versions of one model, ascending; empty when unknown.
  std::vector<int64_t> versions(std::string_view name) const;
  // Every ready version of every model (statistics, metrics).
  std::vector<std::shared_ptr<ModelVersion>> all_versions() const;
  // Models in the repositories (also unloaded ones) with their states, sorted by name.
  std::vector<RepositoryIndexEntry> index(bool ready_only) const;
  // True when every model the control mode asked for loaded.
  bool all_loaded() const;

  // Loads or reloads a model (explicit mode; in none mode Unsupported). `config_json`, when given,
  // replaces config.pbtxt (the load API's "config" parameter). Throws on failure; the versions
  // served before a failed reload stay served.
  void load(const std::string& name, const std::optional<std::string>& config_json = {});
  // Unloads every version of a model (explicit mode); in-flight requests finish.
  void unload(const std::string& name);
  // Rescans the repositories once (poll mode, or called by tests).
  void poll();

  const RepositoryOptions& options() const { return options_; }
  const ResourceBudget& budget() const { return *budget_; }
  // Stops every running and queued request of every version (the end of a drain): they fail
  // with Unavailable at their next step or Loop iteration.
  void cancel_requests() { cancel_->store(true); }

 private:
  struct Entry {
    std::map<int64_t, std::shared_ptr<ModelVersion>> versions;
    ModelState state = ModelState::Unavailable;
    std::string reason;
    std::string fingerprint;
    std::vector<int64_t> last_versions;  // for the index after an unload
    std::vector<std::string> composing;  // a served ensemble: the models its steps run
    bool ensemble_failed = false;        // an ensemble whose last load failed (poll retries it)
    bool unloaded_with_step = false;     // unloaded as a composing model was: back with it
  };
  struct Lookup;
  std::optional<std::string> find_model_dir(const std::string& name) const;
  std::vector<std::string> list_models() const;
  // Loads one model (an ensemble's composing models inside), then, at the outermost level, the
  // ensembles its load brings back (returning_).
  void load_locked(const std::string& name, const std::optional<std::string>& config_json);
  void load_one_locked(const std::string& name, const std::optional<std::string>& config_json);
  void unload_locked(const std::string& name, const std::string& reason);
  void poll_loop();
  std::shared_ptr<ModelVersion> adopt(ModelVersion* version);
  // Starts one top-level operation (start, poll, a load or unload request): forgets which
  // models the last one tried.
  void begin_operation();

  // Ensembles (repository_ensembles.cpp), all under load_mutex_. Loads the composing models of
  // ensemble `name` that are not served and checks them (Triton's words on failure).
  void load_dependencies_locked(const std::string& name, const ModelConfig& config);
  // Unloads the ensembles serving a step with `name`, and theirs in turn, for `reason`.
  void unload_dependents_locked(const std::string& name, const std::string& reason);
  // Checks the served ensembles using `name` against what it serves now; unloads those that
  // no longer fit, saying why. Then loads again the ensembles that were unloaded because `name`
  // was (as Triton brings them back).
  void recheck_dependents_locked(const std::string& name);
  // Retries the ensembles whose load failed for a composing model (poll, after loading some).
  void retry_ensembles_locked();
  // Finds served versions for an ensemble's steps, safely past the repository's end.
  ModelResolver resolver() const;

  RepositoryOptions options_;
  std::shared_ptr<ResourceBudget> budget_;
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  mutable std::mutex load_mutex_;  // serializes load / unload / poll
  mutable std::mutex map_mutex_;   // guards models_ for lookups
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> models_;
  bool start_failed_ = false;
  std::shared_ptr<Lookup> lookup_;
  // Under load_mutex_: the ensembles being loaded, outermost first (an ensemble's composing
  // models load inside its load); the ensembles to load again once those are done (unloaded
  // with a model that is back); the models the current operation tried and failed to load.
  std::vector<std::string> loading_;
  std::vector<std::string> returning_;
  std::set<std::string> attempted_, failed_;

  std::mutex poll_mutex_;
  std::condition_variable poll_cv_;
  bool stopping_ = false;
  std::thread poll_thread_;

  // Destroys versions their last owner let go of, off the owner's thread (often a worker of the
  // very version). Shared with the deleters, so a version outliving the repository is still safe.
  struct Reaper;
  std::shared_ptr<Reaper> reaper_;
};

}  // namespace kiln::server
