#include "server/budget.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <limits>

#include "core/error.hpp"

namespace kiln::server {

struct BudgetState {
  std::mutex mutex;
  size_t max_instances = 0, max_threads = 0;
  size_t instances = 0, threads = 0;
};

namespace {

// A number in a one-line /proc or /sys file; 0 when absent or not a number ("max").
size_t read_limit_file(const char* path) {
  std::ifstream in(path);
  unsigned long long v = 0;
  if (!(in >> v)) return 0;
  return static_cast<size_t>(v);
}

// The fewest threads the OS lets this process have in all (0: no finite limit found).
size_t os_thread_limit() {
  size_t limit = 0;
  auto take = [&](size_t v) {
    if (v > 0) limit = limit == 0 ? v : std::min(limit, v);
  };
  rlimit r{};
  if (getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    take(static_cast<size_t>(r.rlim_cur));
  }
  take(read_limit_file("/proc/sys/kernel/threads-max"));
  take(read_limit_file("/sys/fs/cgroup/pids.max"));       // cgroup v2
  take(read_limit_file("/sys/fs/cgroup/pids/pids.max"));  // cgroup v1
  return limit;
}

size_t capped_by_os(size_t wanted) {
  const size_t os = os_thread_limit();
  return os == 0 ? wanted : std::max<size_t>(1, std::min(wanted, os / 2));
}

}  // namespace

size_t default_thread_budget() {
  return capped_by_os(std::max<size_t>(256, 16 * online_cpus()));
}

size_t default_instance_budget() {
  return std::min(default_thread_budget(), std::max<size_t>(64, 4 * online_cpus()));
}

ResourceBudget::ResourceBudget(size_t max_instances, size_t max_threads)
    : state_(std::make_shared<BudgetState>()) {
  KILN_CHECK_ARG(max_instances >= 1, "the model instance budget must be at least 1");
  KILN_CHECK_ARG(max_threads >= 1, "the thread budget must be at least 1");
  state_->max_instances = max_instances;
  state_->max_threads = max_threads;
}

ResourceBudget::Lease ResourceBudget::reserve(const std::string& who, const BudgetDemand& d) {
  std::lock_guard lock(state_->mutex);
  const BudgetState& s = *state_;
  KILN_CHECK_ARG(d.instances <= s.max_instances && d.threads <= s.max_threads,
                 "{}: {} needs {} instances and {} threads; this server's budget is {} instances "
                 "(--model-instance-budget) and {} threads (--thread-budget)",
                 who, d.detail, d.instances, d.threads, s.max_instances, s.max_threads);
  KILN_CHECK(d.instances <= s.max_instances - s.instances && d.threads <= s.max_threads - s.threads,
             ErrorCode::Unavailable,
             "{}: {} needs {} instances and {} threads, but the loaded models already hold {} of "
             "the {} instances (--model-instance-budget) and {} of the {} threads "
             "(--thread-budget); unload a model or raise the budget",
             who, d.detail, d.instances, d.threads, s.instances, s.max_instances, s.threads,
             s.max_threads);
  state_->instances += d.instances;
  state_->threads += d.threads;
  Lease lease;
  lease.state_ = state_;
  lease.instances_ = d.instances;
  lease.threads_ = d.threads;
  return lease;
}

size_t ResourceBudget::max_instances() const {
  return state_->max_instances;
}
size_t ResourceBudget::max_threads() const {
  return state_->max_threads;
}
size_t ResourceBudget::instances_in_use() const {
  std::lock_guard lock(state_->mutex);
  return state_->instances;
}
size_t ResourceBudget::threads_in_use() const {
  std::lock_guard lock(state_->mutex);
  return state_->threads;
}

ResourceBudget::Lease::Lease(Lease&& other) noexcept
    : state_(std::move(other.state_)), instances_(other.instances_), threads_(other.threads_) {
  other.instances_ = other.threads_ = 0;
}

ResourceBudget::Lease& ResourceBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    instances_ = other.instances_;
    threads_ = other.threads_;
    other.instances_ = other.threads_ = 0;
  }
  return *this;
}

ResourceBudget::Lease::~Lease() {
  release();
}

void ResourceBudget::Lease::release() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mutex);
    state_->instances -= instances_;
    state_->threads -= threads_;
  }
  state_.reset();
  instances_ = threads_ = 0;
}

}  // namespace kiln::server
