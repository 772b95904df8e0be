#pragma once
// The server's budget of model instances and threads. Every instance is a worker thread with its
// own Session whose kernels run on its intra-op threads: the worker itself plus an OpenMP team
// that libgomp creates at the instance's first inference. When the OS refuses one of those
// threads libgomp exits the process (nothing can catch it), so the total is a budget checked
// before anything is created: a version reserves its instances and threads (instances x intra-op
// threads) first, a config over budget is refused naming the model and the figures, and the
// reservation returns when the version is unloaded.
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "core/cpus.hpp"

namespace kiln::server {

struct BudgetState;

// CPUs this process may run on (core/cpus.hpp), what an intra-op thread count of 0 means.
using kiln::online_cpus;
// Defaults from the machine: threads 16 per CPU (at least 256), instances 4 per CPU (at least
// 64), both at most half of what the OS allows this process (RLIMIT_NPROC, the pids cgroup,
// kernel.threads-max), since the server's own threads and other processes share that limit.
size_t default_thread_budget();
size_t default_instance_budget();

struct BudgetDemand {
  size_t instances = 0;
  size_t threads = 0;  // sum of intra-op threads over the instances
  std::string detail;  // how it was counted, for messages: "2 groups: 512 instances x 2 threads"
};

class ResourceBudget {
 public:
  ResourceBudget(size_t max_instances, size_t max_threads);

  // What a loaded version holds; returned to the budget by release() or the destructor.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    void release();
    size_t instances() const { return instances_; }
    size_t threads() const { return threads_; }

   private:
    friend class ResourceBudget;
    std::shared_ptr<BudgetState> state_;
    size_t instances_ = 0, threads_ = 0;
  };

  // Reserves `demand` for `who` ("model 'm' version 1"). Throws kiln::Error InvalidArgument when
  // the demand alone exceeds the budget (this server can never load it), Unavailable when it
  // only does with what is loaded now; both messages name `who`, the demand and the budget.
  Lease reserve(const std::string& who, const BudgetDemand& demand);

  size_t max_instances() const;
  size_t max_threads() const;
  size_t instances_in_use() const;
  size_t threads_in_use() const;

 private:
  std::shared_ptr<BudgetState> state_;
};

}  // namespace kiln::server
