#pragma once
// The worker threads of a model's instances, shared by the schedulers (dynamic batcher,
// sequence batcher): one thread an instance, started all or none, stopped and joined together.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace kiln::server {

class InstanceWorkers {
 public:
  // Starts `count` threads running `work(i)`. When the OS refuses one, the started ones are
  // stopped (stop(), which a worker sees under `mutex` and on `cv`) and joined, and a clear
  // error names the model (a std::thread left joinable would terminate the process).
  template <typename Work>
  void start(size_t count, Work work, std::mutex& mutex, bool& stopping,
             std::condition_variable& cv, const std::string& model, int64_t version) {
    threads_.reserve(count);
    try {
      for (size_t i = 0; i < count; ++i) threads_.emplace_back([work, i] { work(i); });
    } catch (const std::exception& e) {
      const size_t started = threads_.size();
      stop(mutex, stopping, cv);
      fail(ErrorCode::Unavailable,
           "model '{}' version {}: the OS refused the thread of instance {} of {} ({}); lower "
           "the instance_group count or --model-instance-budget",
           model, version, started + 1, count, e.what());
    }
  }

  // Sets `stopping` under `mutex`, wakes every worker and joins them.
  void stop(std::mutex& mutex, bool& stopping, std::condition_variable& cv) {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    cv.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  std::vector<std::thread> threads_;
};

}  // namespace kiln::server
