#pragma once
// A server-wide byte budget for memory that clients make the server hold: request bodies being
// read, decoded requests waiting in a queue, responses being written. A frontend leases bytes
// before it spends them and refuses the request (503) when the budget cannot cover it, so many
// slow or large requests together cannot exhaust the process, however the connections are
// spread.
#include <atomic>
#include <cstddef>
#include <utility>

namespace kiln::server {

class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit) : limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Takes `bytes` when they fit under the limit; false (and nothing taken) when they do not.
  bool try_acquire(size_t bytes);
  void release(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

// Bytes held from a budget, given back when the lease ends. Movable, so it can travel with the
// request it pays for.
class MemoryLease {
 public:
  MemoryLease() = default;
  explicit MemoryLease(MemoryBudget& budget) : budget_(&budget) {}
  MemoryLease(MemoryLease&& other) noexcept
      : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  MemoryLease& operator=(MemoryLease&& other) noexcept;
  MemoryLease(const MemoryLease&) = delete;
  MemoryLease& operator=(const MemoryLease&) = delete;
  ~MemoryLease() { reset(); }

  // Grows the lease by `bytes`; false when the budget cannot cover them (the lease is unchanged).
  bool grow(size_t bytes);
  // Gives back `bytes` of the lease (at most what it holds), keeping the rest.
  void shrink(size_t bytes);
  void reset();
  size_t bytes() const { return bytes_; }

 private:
  MemoryBudget* budget_ = nullptr;
  size_t bytes_ = 0;
};

// The default budget: a quarter of the machine's physical memory, at least 256 MiB.
size_t default_memory_budget();

}  // namespace kiln::server
