#include "runtime/executor_pool.hpp"

#include <algorithm>
#include <system_error>

#include "core/error.hpp"
#include "core/log.hpp"

namespace kiln::runtime {

ExecutorPool::ExecutorPool(std::unique_ptr<Executor> first, Factory make_more, size_t limit,
                           bool queue_overlaps)
    : make_more_(std::move(make_more)),
      limit_(std::max<size_t>(limit, 1)),
      queue_overlaps_(queue_overlaps) {
  KILN_CHECK(first != nullptr, ErrorCode::Internal, "an executor pool needs its first executor");
  first_ = first.get();
  executors_.push_back(std::move(first));
  idle_.push_back(first_);
}

ExecutorPool::~ExecutorPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : runners_) t.join();
}

Executor* ExecutorPool::take_or_make(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (!idle_.empty()) {
      Executor* e = idle_.back();
      idle_.pop_back();
      return e;
    }
    if (making_ || executors_.size() >= limit_) return nullptr;
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
      return executors_.back().get();
    }
    // Out of memory (or another failure) making one more: the runs share what exists.
    limit_ = executors_.size();
    log_warning(
        "could not prepare executor {} for overlapping runs ({}); runs of this session now "
        "share {}",
        executors_.size() + 1, why.empty() ? "unknown error" : why, executors_.size());
    returned_.notify_all();
  }
}

ExecutorPool::Lease ExecutorPool::acquire() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (Executor* e = take_or_make(lock)) return Lease(*this, *e);
    returned_.wait(lock);
  }
}

void ExecutorPool::run(const Job& job) {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Queued runs go first: a caller that arrives while some wait does not overtake them.
    if (queue_.empty()) {
      if (Executor* e = take_or_make(lock)) {
        lock.unlock();
        Lease lease(*this, *e);
        job(*e);
        return;
      }
    }
    if (queue_overlaps_) {
      if (runners_.size() < executors_.size()) {
        try {
          runners_.emplace_back([this] { runner_loop(); });
        } catch (const std::system_error& e) {
          // No thread to hand the run to: the caller waits for an executor and runs it itself.
          if (runners_.empty()) {
            log_warning("could not start a thread for overlapping runs ({}); runs take turns",
                        e.what());
            returned_.wait(lock);
            continue;
          }
        }
      }
      Queued q{.job = &job};
      queue_.push_back(&q);
      work_.notify_one();
      q.done_cv.wait(lock, [&] { return q.done; });
      if (q.error) std::rethrow_exception(q.error);
      return;
    }
    returned_.wait(lock);
  }
}

void ExecutorPool::runner_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !idle_.empty()); });
    if (queue_.empty() || idle_.empty()) return;  // stopping, nothing left to run
    Queued* q = queue_.front();
    queue_.pop_front();
    Executor* e = idle_.back();
    idle_.pop_back();
    ++queued_runs_;
    lock.unlock();
    // Nothing escapes the pool's thread: what the run throws goes back to its caller.
    try {
      (*q->job)(*e);
    } catch (...) {
      q->error = std::current_exception();
    }
    lock.lock();
    return_locked(*e);
    q->done = true;
    q->done_cv.notify_one();
  }
}

void ExecutorPool::return_locked(Executor& executor) {
  // The first goes on top, so a lone thread keeps running it (and introspection sees its run).
  if (&executor == first_) {
    idle_.push_back(&executor);
  } else {
    idle_.insert(idle_.begin(), &executor);
  }
  // A queued run takes it first (a pool thread), else a caller waiting for one.
  if (!queue_.empty()) {
    work_.notify_one();
  } else {
    returned_.notify_one();
  }
}

void ExecutorPool::give_back(Executor& executor) {
  std::lock_guard lock(mutex_);
  return_locked(executor);
}

size_t ExecutorPool::size() const {
  std::lock_guard lock(mutex_);
  return executors_.size();
}

size_t ExecutorPool::queued_runs() const {
  std::lock_guard lock(mutex_);
  return queued_runs_;
}

size_t ExecutorPool::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

}  // namespace kiln::runtime
