#include "server/memory_budget.hpp"

#include <unistd.h>

#include <algorithm>

namespace kiln::server {

bool MemoryBudget::try_acquire(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || used > limit_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

MemoryLease& MemoryLease::operator=(MemoryLease&& other) noexcept {
  if (this != &other) {
    reset();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool MemoryLease::grow(size_t bytes) {
  if (budget_ == nullptr || bytes == 0) return true;  // no budget: nothing to charge
  if (!budget_->try_acquire(bytes)) return false;
  bytes_ += bytes;
  return true;
}

void MemoryLease::shrink(size_t bytes) {
  bytes = std::min(bytes, bytes_);
  if (budget_ != nullptr && bytes > 0) budget_->release(bytes);
  bytes_ -= bytes;
}

void MemoryLease::reset() {
  if (budget_ != nullptr && bytes_ > 0) budget_->release(bytes_);
  bytes_ = 0;
}

size_t default_memory_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  const size_t physical =
      pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
  return std::max(physical / 4, size_t{256} << 20);
}

}  // namespace kiln::server
