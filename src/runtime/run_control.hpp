#pragma once
// The deadline and cancellation of one run. The interpreter and the executor check it between
// plan steps and at the start of every subgraph run (each Loop or Scan iteration, each If branch),
// so work whose amount the input chooses (a Loop's trip count) stops when its caller says so: a
// server request past its timeout or cancelled by a drain, the precision gate past its time
// budget. A check costs one relaxed atomic load and one steady_clock read.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace kiln::runtime {

using RunClock = std::chrono::steady_clock;

// `start` + `timeout_us`, saturating at RunClock::time_point::max() ("never"): a timeout near
// 2^63 microseconds would otherwise wrap the clock's nanosecond count into the past.
RunClock::time_point deadline_after(RunClock::time_point start, uint64_t timeout_us);
// The shorter of two timeouts where 0 means "none".
uint64_t shorter_timeout(uint64_t a_us, uint64_t b_us);

// Thrown by RunControl::check; passes through the node context the runtime adds to other errors,
// so its message is exactly the control's.
class RunStopped : public Error {
 public:
  RunStopped(ErrorCode code, const std::string& message, bool cancelled)
      : Error(code, message), cancelled_(cancelled) {}
  // True when stopped by `cancel`, false when by the deadline.
  bool cancelled() const { return cancelled_; }

 private:
  bool cancelled_;
};

struct RunControl {
  RunClock::time_point deadline = RunClock::time_point::max();
  // Set (by another thread) to stop the run at its next check.
  const std::atomic<bool>* cancel = nullptr;
  ErrorCode code = ErrorCode::Unavailable;
  std::string deadline_message = "the run's deadline passed";
  std::string cancel_message = "the run was cancelled";

  // True when the run must stop now.
  bool stopped() const {
    return (cancel != nullptr && cancel->load(std::memory_order_relaxed)) ||
           (deadline != RunClock::time_point::max() && RunClock::now() >= deadline);
  }
  // Throws RunStopped when the run must stop (cancellation first).
  void check() const;
};

// control->check() when there is a control.
inline void check_run(const RunControl* control) {
  if (control != nullptr) control->check();
}

}  // namespace kiln::runtime
