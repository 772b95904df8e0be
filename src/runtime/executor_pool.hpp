#pragma once
// Executors for the overlapping runs of one session. An executor runs one request at a time (its
// arena, kernels' scratch and recorded device work are per executor), so runs from several
// threads at once each lease an executor of their own: the first one is made at open, more are
// made from its plan (same kernels, same memory plan, no placement again) when a run finds every
// executor busy, up to a limit; past the limit a run waits for one to come back. A single-threaded
// user never pays for more than the first.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/executor.hpp"

namespace kiln::runtime {

class ExecutorPool {
 public:
  // Makes one more executor like the first (called with no lock held; may throw).
  using Factory = std::function<std::unique_ptr<Executor>()>;

  // `first_runs_alone`: the first executor (with more threads than the others) is leased only
  // while no other run is in flight, so overlapping runs share the cores one thread each instead
  // of the first's team competing with them.
  ExecutorPool(std::unique_ptr<Executor> first, Factory make_more, size_t limit,
               bool first_runs_alone = false);
  ExecutorPool(const ExecutorPool&) = delete;
  ExecutorPool& operator=(const ExecutorPool&) = delete;

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

  // A free executor (the first when it is free, so one thread's runs always use it; with
  // first_runs_alone, only when no other run is in flight), a new one when all are busy and the
  // limit allows, else the next one given back.
  Lease acquire();

  // Whether runs of this pool overlapped (a run was leased while another was in flight) within
  // `window` before now.
  bool overlapped_within(std::chrono::steady_clock::duration window) const;

  // Whether the first executor is kept out of overlapping runs (the constructor's choice).
  bool first_runs_alone() const { return first_runs_alone_; }

  // The executor made at open: what introspection (kernel choices, profiles, device times)
  // reads.
  Executor& first() const { return *first_; }
  // Executors made so far, and the most there may be.
  size_t size() const;
  size_t limit() const;

 private:
  void give_back(Executor& executor);

  Factory make_more_;
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Executor>> executors_;  // front: the first; stable addresses
  std::vector<Executor*> idle_;                       // back: taken next
  Executor* first_;                                   // executors_.front(), read without the lock
  size_t limit_;
  const bool first_runs_alone_;
  bool making_ = false;  // one thread makes a new executor at a time
  // When a run was last leased while another was in flight (epoch: never).
  std::chrono::steady_clock::time_point last_overlap_{};
};

}  // namespace kiln::runtime
