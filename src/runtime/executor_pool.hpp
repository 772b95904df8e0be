#pragma once
// Executors for the overlapping runs of one session. An executor runs one request at a time (its
// arena, kernels' scratch and recorded device work are per executor), so runs from several
// threads at once each lease an executor of their own: the first one is made at open, more are
// made from its plan (same kernels, same memory plan, no placement again) when a run finds every
// executor busy, up to a limit; past the limit a run waits for one to come back. A single-threaded
// user never pays for more than the first.
//
// Queued overlaps (CPU runs of several OpenMP threads): libgomp gives every thread that opens a
// parallel region a team of its own, so runs from many caller threads meant as many teams on the
// same cores, each woken from sleep when its caller's turn came (bench/results/
// 2026-12-03-cpu-wait-policy.md). With `queue_overlaps`, a run that finds no executor free (or
// runs already queued) is handed to one of the pool's own threads instead, which take the queued
// runs in order: under contention the runs go through a few long-lived OpenMP masters whose teams
// stay awake, as onnxruntime runs every run on its session's pool; a lone caller still runs on
// its own thread, with no hand-off.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/executor.hpp"

namespace kiln::runtime {

class ExecutorPool {
 public:
  // Makes one more executor like the first (called with no lock held; may throw).
  using Factory = std::function<std::unique_ptr<Executor>()>;

  ExecutorPool(std::unique_ptr<Executor> first, Factory make_more, size_t limit,
               bool queue_overlaps = false);
  ExecutorPool(const ExecutorPool&) = delete;
  ExecutorPool& operator=(const ExecutorPool&) = delete;
  // Joins the pool's threads; no run may be in flight.
  ~ExecutorPool();

  using Job = std::function<void(Executor&)>;
  // Runs `job` on an executor: on the calling thread when one is free (or can be made) and no
  // run is queued; else, with queue_overlaps, on one of the pool's threads (made when first
  // needed, at most one per executor) while the caller waits; else the caller waits for an
  // executor. What the job throws is rethrown here.
  void run(const Job& job);

  // An executor held for one run, given back when the lease ends.
  class Lease {
   public:
    Lease(ExecutorPool& pool, Executor& executor) : pool_(&pool), executor_(&executor) {}
    Lease(Lease&& other) noexcept : pool_(other.pool_), executor_(other.executor_) {
      other.pool_ = nullptr;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_) pool_->give_back(*executor_);
    }
    Executor& operator*() const { return *executor_; }
    Executor* operator->() const { return executor_; }

   private:
    ExecutorPool* pool_;
    Executor* executor_;
  };

  // A free executor (the first when it is free, so one thread's runs always use it), a new one
  // when all are busy and the limit allows, else the next one given back.
  Lease acquire();

  // The executor made at open: what introspection (kernel choices, profiles, device times)
  // reads.
  Executor& first() const { return *first_; }
  // Executors made so far, and the most there may be.
  size_t size() const;
  size_t limit() const;
  // Runs the pool's threads took (queue_overlaps), for tests and measurements.
  size_t queued_runs() const;

 private:
  struct Queued {
    const Job* job;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
  };

  void give_back(Executor& executor);
  // Under the lock: a free executor, or a new one when the limit allows (the lock is released
  // while making it); nullptr when neither.
  Executor* take_or_make(std::unique_lock<std::mutex>& lock);
  void return_locked(Executor& executor);
  void runner_loop();

  Factory make_more_;
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Executor>> executors_;  // front: the first; stable addresses
  std::vector<Executor*> idle_;                       // back: taken next
  Executor* first_;                                   // executors_.front(), read without the lock
  size_t limit_;
  bool making_ = false;  // one thread makes a new executor at a time
  const bool queue_overlaps_;
  std::deque<Queued*> queue_;     // runs waiting for a pool thread
  std::condition_variable work_;  // pool threads: a run is queued and an executor is free
  std::vector<std::thread> runners_;
  bool stopping_ = false;
  size_t queued_runs_ = 0;
};

}  // namespace kiln::runtime
