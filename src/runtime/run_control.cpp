#include "runtime/run_control.hpp"

#include <limits>

namespace kiln::runtime {

RunClock::time_point deadline_after(RunClock::time_point start, uint64_t timeout_us) {
  using Rep = RunClock::rep;
  constexpr Rep kMax = std::numeric_limits<Rep>::max();
  constexpr Rep kPerMicrosecond =
      std::chrono::duration_cast<RunClock::duration>(std::chrono::microseconds(1)).count();
  static_assert(kPerMicrosecond >= 1, "the run clock must resolve microseconds");
  const Rep now = start.time_since_epoch().count();
  // Ticks left before the clock's maximum; a start before the epoch leaves at least kMax.
  const Rep room = now >= 0 ? kMax - now : kMax;
  if (timeout_us > static_cast<uint64_t>(room / kPerMicrosecond)) {
    return RunClock::time_point::max();
  }
  return start + RunClock::duration(static_cast<Rep>(timeout_us) * kPerMicrosecond);
}

uint64_t shorter_timeout(uint64_t a_us, uint64_t b_us) {
  if (a_us == 0) return b_us;
  if (b_us == 0) return a_us;
  return a_us < b_us ? a_us : b_us;
}

void RunControl::check() const {
  if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
    throw RunStopped(code, cancel_message, true);
  }
  if (deadline != RunClock::time_point::max() && RunClock::now() >= deadline) {
    throw RunStopped(code, deadline_message, false);
  }
}

}  // namespace kiln::runtime
