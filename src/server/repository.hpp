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
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
};

// States as the repository index reports them.
// NotLoaded: in the repository but never loaded; Triton's index gives such a model no state.
enum class ModelState { Loading, Ready, Unloading, Unavailable, NotLoaded };
std::string_view model_state_name(ModelState state);  // "LOADING", "READY", ...; "" NotLoaded

struct RepositoryIndexEntry {
  std::string name;
  std::string version;  // empty for a model with no loaded version
  ModelState state = ModelState::Unavailable;
  std::string reason;  // why a load failed or the model was unloaded
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

  // The version to run: `version` < 0 picks the highest ready version. Throws InvalidArgument
  // "Request for unknown model: 'm' is not found" (Triton's code for it), InvalidArgument for a
  // version that is not served, Unavailable when no version is ready.
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
  struct Entry;
  std::optional<std::string> find_model_dir(const std::string& name) const;
  std::vector<std::string> list_models() const;
  void load_locked(const std::string& name, const std::optional<std::string>& config_json);
  void unload_locked(const std::string& name, const std::string& reason);
  void poll_loop();
  std::shared_ptr<ModelVersion> adopt(ModelVersion* version);

  RepositoryOptions options_;
  std::shared_ptr<ResourceBudget> budget_;
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  mutable std::mutex load_mutex_;  // serializes load / unload / poll
  mutable std::mutex map_mutex_;   // guards models_ for lookups
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> models_;
  bool start_failed_ = false;

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
