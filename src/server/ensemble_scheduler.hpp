#pragma once
// The scheduler of an ensemble version: each request runs as its steps, each step a request to a
// composing model through that model's own scheduler (its queue, dynamic batcher, instances and
// statistics, as a client's request would), started as soon as the tensors it reads exist, so
// independent steps run in parallel. Tensors pass between steps without copies.
//
// Per request, as Triton: steps whose outputs the request does not need are not run; a step
// that fails ends the ensemble with the step's status and message, prefixed "in ensemble 'e', "
// and followed by which step and model failed; the answer comes once no step is running. The
// ensemble's statistics count its requests (success, fail, inference and execution counts, one
// execution per request) and charge each the compute time of its steps; the composing models
// count their own.
//
// Limits: the steps inherit the request's run deadline (its timeout capped by
// --request-timeout-ms, counted from when the frontend got it), its cancellation and priority;
// the tensors the steps produce are leased from the server's request memory budget until no
// step or answer needs them, and an ensemble that would exceed it fails with Unavailable.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/ensemble_config.hpp"
#include "server/infer_types.hpp"
#include "server/memory_budget.hpp"
#include "server/request_check.hpp"
#include "server/statistics.hpp"

namespace kiln::server {

class ModelVersion;

// The served version of a composing model (-1: the highest); throws kiln::Error (NotFound) when
// none is served.
using ModelResolver =
    std::function<std::shared_ptr<ModelVersion>(std::string_view name, int64_t version)>;

struct EnsembleOptions {
  std::string model_name;
  int64_t model_version = 0;
  int max_batch_size = 0;
  std::vector<TensorSpec> inputs, outputs;
  EnsemblePlan plan;
  ModelResolver resolve;
  std::shared_ptr<MemoryBudget> memory;  // the server's request memory (null: unlimited)
  uint64_t request_timeout_us = 0;       // --request-timeout-ms (0: none)
};

class EnsembleScheduler {
 public:
  // `statistics` must outlive the scheduler.
  EnsembleScheduler(EnsembleOptions options, ModelStatistics& statistics);
  EnsembleScheduler(const EnsembleScheduler&) = delete;
  EnsembleScheduler& operator=(const EnsembleScheduler&) = delete;

  // Checks the request against the ensemble's own inputs and outputs and starts its first steps;
  // `done` is called exactly once: before this returns when the request is refused, else from
  // the thread that finishes the last step. `keepalive` (the ensemble's version) is held until
  // then.
  void enqueue(std::unique_ptr<InferRequest> request, InferCallback done,
               std::shared_ptr<const void> keepalive);

  const EnsembleOptions& options() const { return options_; }

 private:
  struct Run;
  // These run on the composing models' worker threads (the step callbacks): they catch every
  // failure and end the request with it, so nothing escapes a worker.
  static void launch(const std::shared_ptr<Run>& run, size_t step);
  static void step_done(const std::shared_ptr<Run>& run, size_t step, const std::string& model,
                        int64_t version, bool model_batches, Status status,
                        std::unique_ptr<InferResponse> response);
  // Stores a finished step's outputs (or its failure) and collects the steps it makes ready;
  // under the run's mutex.
  static void step_result_locked(Run& run, size_t step, const std::string& model, int64_t version,
                                 bool model_batches, const Status& status, InferResponse* response,
                                 std::vector<size_t>& launch_now);
  static void finish(const std::shared_ptr<Run>& run);
  // The answer (or the failure) from what the steps left; under the run's mutex.
  static void finish_locked(Run& run, std::unique_ptr<InferResponse>& response,
                            std::optional<Status>& failure);

  EnsembleOptions options_;
  ModelStatistics& statistics_;
};

}  // namespace kiln::server
