#pragma once
// The scheduler of one model version: a queue per priority level and one worker thread per model
// instance, each with its own kiln::Session. With dynamic batching a worker merges queued
// requests whose non-batch shapes agree into one execution along the batch dim (up to
// max_batch_size, executing at once when a preferred size is reached, otherwise after at most
// max_queue_delay), then splits the outputs back. Without it each request runs alone.
//
// Queue policy: a level's max_queue_size refuses new requests with Unavailable "Exceeds maximum
// queue size"; a request whose timeout passes while queued fails with Unavailable "Request
// timeout expired" (REJECT) or waits behind the others (DELAY).
//
// Run deadline: every request also has one, its own `timeout` capped by the server's
// (--request-timeout-ms), counted from when the frontend got it. Past it the request fails with
// "Request timeout expired", queued (whatever the action) or running: the Session stops between
// plan steps and Loop / Scan iterations, so the instance is free again. A drain that reaches its
// exit timeout sets `cancel`, which stops every run the same way.
//
// Latency objective (SlaController, docs/SERVER.md "Latency objective (SLA)"): with one, the
// batcher's queue delay adapts to the measured p99, and a request that could not finish within
// the objective is refused on arrival with Unavailable and a retry hint.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/session.hpp"
#include "server/infer_types.hpp"
#include "server/instance_workers.hpp"
#include "server/model_config.hpp"
#include "server/request_check.hpp"
#include "server/sla_controller.hpp"
#include "server/statistics.hpp"

namespace kiln::server {

struct SchedulerOptions {
  std::string model_name;  // for messages
  int64_t model_version = 0;
  int max_batch_size = 0;  // 0: no batch dim
  bool dynamic_batching = false;
  std::vector<int> preferred_batch_sizes;  // ascending
  uint64_t max_queue_delay_us = 0;
  uint64_t priority_levels = 0;  // 0: one level
  uint64_t default_priority = 0;
  struct QueuePolicy {
    bool delay_on_timeout = false;  // DELAY instead of REJECT
    uint64_t default_timeout_us = 0;
    bool allow_timeout_override = false;
    uint32_t max_queue_size = 0;
  };
  std::vector<QueuePolicy> policies;  // one per level (index 0 when priorities are off)
  std::vector<TensorSpec> inputs, outputs;
  uint64_t latency_objective_ns = 0;                // p99 objective (0: none)
  uint64_t request_timeout_us = 0;                  // the server's cap on a request (0: none)
  std::shared_ptr<const std::atomic<bool>> cancel;  // set: running and queued requests stop

  static SchedulerOptions from_config(const ModelConfig& config, int64_t version);
};

class Scheduler {
 public:
  // Starts one worker per session. `statistics` must outlive the scheduler. When the OS refuses
  // a thread, joins those started and throws Unavailable naming the model.
  Scheduler(SchedulerOptions options, std::vector<std::unique_ptr<Session>> instances,
            ModelStatistics& statistics);
  // Finishes every queued request, then joins the workers.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates the request against the model (inputs, dtypes, shapes, outputs), queues it and
  // returns; `done` is called exactly once, on a worker thread, or before this returns when the
  // request is refused (bad request, queue full). `keepalive` is held until `done` has run (the
  // model version owning this scheduler, so unloading it never drops an accepted request).
  void enqueue(std::unique_ptr<InferRequest> request, InferCallback done,
               std::shared_ptr<const void> keepalive);

  const SchedulerOptions& options() const { return options_; }
  size_t queued() const;
  // The latency objective's state; nullopt without one.
  std::optional<SlaSnapshot> sla() const;

 private:
  struct Pending;
  struct Batch;
  void worker(size_t instance);
  bool take_batch(std::unique_lock<std::mutex>& lock, Batch& batch);
  void execute(Session& session, Batch& batch);
  void fail_expired_locked(Clock::time_point now, std::vector<std::unique_ptr<Pending>>& expired);
  // Admission control under the lock: a refusal's status, or ok.
  Status admit_locked(const Pending& p, size_t level, Clock::time_point now);
  // What one execution taught the controller, under the lock.
  void learn_locked(const Batch& batch);
  // When a batch whose oldest request arrived at `oldest` stops waiting to fill: the queue
  // delay later (the objective's adaptive one, else the configured one).
  Clock::time_point batch_ready_locked(Clock::time_point oldest) const;

  SchedulerOptions options_;
  std::vector<std::unique_ptr<Session>> instances_;
  ModelStatistics& statistics_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::deque<std::unique_ptr<Pending>>> queues_;  // index = priority level - 1
  std::vector<int64_t> queued_rows_;                          // per queue: rows waiting
  std::vector<SlaLoad::Running> running_;  // per instance: its batch (0 rows: idle)
  std::unique_ptr<SlaController> sla_;     // null without a latency objective
  bool stopping_ = false;
  InstanceWorkers workers_;
};

}  // namespace kiln::server
