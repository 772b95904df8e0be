#include "runtime/executor_pool.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/log.hpp"

namespace kiln::runtime {

ExecutorPool::ExecutorPool(std::unique_ptr<Executor> first, Factory make_more, size_t limit,
                           bool first_runs_alone)
    : make_more_(std::move(make_more)),
      limit_(std::max<size_t>(limit, 1)),
      first_runs_alone_(first_runs_alone) {
  KILN_CHECK(first != nullptr, ErrorCode::Internal, "an executor pool needs its first executor");
  first_ = first.get();
  executors_.push_back(std::move(first));
  idle_.push_back(first_);
}

ExecutorPool::Lease ExecutorPool::acquire() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // The most recently given back first (the first executor goes on top when it comes back),
    // passing over the first while another run is in flight under first_runs_alone_ (every
    // executor made and not idle is leased).
    const bool others_running = executors_.size() > idle_.size();
    if (others_running) last_overlap_ = std::chrono::steady_clock::now();
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if (*it == first_ && first_runs_alone_ && others_running) continue;
      Executor* e = *it;
      idle_.erase(std::next(it).base());
      return Lease(*this, *e);
    }
    if (!making_ && executors_.size() < limit_) {
      making_ = true;
      lock.unlock();
      std::unique_ptr<Executor> made;
      std::string why;
      try {
        made = make_more_();
      } catch (const std::exception& e) {
        why = e.what();
      }
      lock.lock();
      making_ = false;
      if (made) {
        executors_.push_back(std::move(made));
        returned_.notify_all();  // another waiter may make the next one
        return Lease(*this, *executors_.back());
      }
      // Out of memory (or another failure) making one more: the runs share what exists.
      limit_ = executors_.size();
      log_warning(
          "could not prepare executor {} for overlapping runs ({}); runs of this session now "
          "share {}",
          executors_.size() + 1, why.empty() ? "unknown error" : why, executors_.size());
      returned_.notify_all();
      continue;
    }
    returned_.wait(lock);
  }
}

void ExecutorPool::give_back(Executor& executor) {
  {
    std::lock_guard lock(mutex_);
    // The first goes on top, so a lone thread keeps running it (and introspection sees its run).
    if (&executor == first_) {
      idle_.push_back(&executor);
    } else {
      idle_.insert(idle_.begin(), &executor);
    }
  }
  // Every waiter looks again: with first_runs_alone_, the one executor given back may be one
  // that a particular waiter may not take while another may.
  if (first_runs_alone_) {
    returned_.notify_all();
  } else {
    returned_.notify_one();
  }
}

bool ExecutorPool::overlapped_within(std::chrono::steady_clock::duration window) const {
  std::lock_guard lock(mutex_);
  return last_overlap_ != std::chrono::steady_clock::time_point{} &&
         std::chrono::steady_clock::now() - last_overlap_ < window;
}

size_t ExecutorPool::size() const {
  std::lock_guard lock(mutex_);
  return executors_.size();
}

size_t ExecutorPool::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

}  // namespace kiln::runtime
