#pragma once
// The protocol-neutral server core shared by the HTTP and gRPC frontends: health, server and
// model metadata, inference dispatch, statistics, repository control, and graceful drain.
// Frontends decode the wire into InferRequest, call infer_async and encode the result; they
// never touch the repository or scheduler directly except through this class.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/infer_types.hpp"
#include "server/memory_budget.hpp"
#include "server/repository.hpp"
#include "server/response_cache.hpp"
#include "server/shared_memory.hpp"
#include "server/statistics.hpp"
#include "server/trace.hpp"

namespace kiln::server {

struct ServerOptions {
  std::string server_id = "kiln";  // --id
  RepositoryOptions repository;
  bool strict_readiness = true;  // ready only when every requested model loaded
  int exit_timeout_secs = 30;    // --exit-timeout-secs: how long drain waits for in-flight work
  // --request-memory-bytes: what all requests in flight together may hold (bodies being read,
  // requests waiting or running, responses being written); 0: default_memory_budget().
  size_t request_memory_bytes = 0;
  // --cache-config local,size=N: the response cache's bytes (0: no cache; models that enable
  // response_cache then run every request).
  size_t response_cache_bytes = 0;
  // --trace-config / --trace-*: the trace settings at start (tracing off by default).
  TraceSettings trace;
  // --shared-memory-max-regions, --shared-memory-max-bytes: the shared memory registry.
  SharedMemoryLimits shared_memory;
  // Opens CUDA shared memory regions; empty: the GPU backend (the fuzz target gives host memory).
  DeviceSharedMemoryOpener shared_memory_device;
};

struct ServerMetadata {
  std::string name;
  std::string version;
  std::vector<std::string> extensions;
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;  // served versions, as strings (protocol)
  std::string platform;
  std::vector<TensorMetadata> inputs, outputs;
};

// What a drain ended with.
struct DrainResult {
  size_t at_exit_timeout = 0;  // requests in flight when the exit timeout ended (0: clean)
  size_t left = 0;             // of those, still in flight after cancelling them
};

// Statistics of one model version, for the statistics endpoints.
struct ModelStatisticsEntry {
  std::string name;
  int64_t version = 0;
  StatisticsSnapshot stats;
};

class InferenceServer {
 public:
  explicit InferenceServer(ServerOptions options);
  ~InferenceServer();

  // Loads models per the control mode. Returns false when some model failed to load.
  bool start();

  bool live() const { return !stopped_.load(); }
  // False while draining and, with strict readiness, while some requested model failed to load.
  bool ready() const;
  ServerMetadata metadata() const;

  // Metadata / config / readiness of a model: `version` < 0 means the highest ready version.
  // Throw as ModelRepository::get does.
  ModelMetadata model_metadata(std::string_view name, int64_t version = -1) const;
  const ModelConfig& model_config(std::string_view name, int64_t version,
                                  std::shared_ptr<ModelVersion>& holder) const;
  bool model_ready(std::string_view name, int64_t version = -1) const;

  // Runs a request. `done` is called exactly once, possibly before this returns (unknown model,
  // invalid request, queue full, draining: Unavailable "Server is shutting down").
  void infer_async(std::unique_ptr<InferRequest> request, InferCallback done);

  // Statistics of every version of `name` (all models when empty; `version` < 0: all versions).
  std::vector<ModelStatisticsEntry> statistics(std::string_view name = {},
                                               int64_t version = -1) const;

  // The budget every frontend leases request memory from (and ensembles their steps' tensors).
  MemoryBudget& request_memory() { return *request_memory_; }

  // Request tracing: the frontends sample each decoded request (Tracer::start) and stamp its
  // receive and send times; the settings endpoints read and change it.
  Tracer& tracer() { return tracer_; }
  // The system shared memory regions clients registered (inputs and outputs of requests).
  SharedMemoryRegistry& shared_memory() { return shared_memory_; }

  // Null without --cache-config.
  const ResponseCache* response_cache() const { return cache_.get(); }
  ModelRepository& repository() { return *repository_; }
  const ModelRepository& repository() const { return *repository_; }
  const ServerOptions& options() const { return options_; }

  // Graceful drain (SIGTERM): readiness fails at once, new requests get Unavailable, and this
  // waits until every accepted request has completed or `exit_timeout_secs` passed. Requests
  // still in flight then are cancelled (they fail with Unavailable at their next plan step or
  // Loop iteration) and waited for a few seconds more, so their clients get an answer and the
  // process can exit promptly.
  DrainResult drain();
  bool draining() const { return draining_.load(); }
  size_t inflight() const { return inflight_.load(); }

 private:
  ServerOptions options_;
  // Before the repository: the ensembles it loads lease from it.
  std::shared_ptr<MemoryBudget> request_memory_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<ResponseCache> cache_;  // null without --cache-config
  Tracer tracer_;
  SharedMemoryRegistry shared_memory_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> start_ok_{false};
  std::atomic<size_t> inflight_{0};
  mutable std::mutex idle_mutex_;
  std::condition_variable idle_cv_;
};

}  // namespace kiln::server
