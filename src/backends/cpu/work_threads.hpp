#pragma once
// How many OpenMP threads one CPU primitive runs on. Every parallel region wakes the other
// threads of the caller's team: a few microseconds each on an idle machine, tens to hundreds
// when the machine is busy and a woken thread waits for a core (docs/BACKENDS.md, "Threads per
// primitive"; bench/results/2026-12-03-cpu-wait-policy.md). A kernel whose whole work takes
// less than that gains nothing from a second thread, so small primitives run on the calling
// thread alone, as onnxruntime's thread pool does with its cost model.
#include <cstdint>

namespace kiln::backends::cpu {

// Threads for work of about `flops` arithmetic operations touching `bytes` of memory: one per
// kMinMicrosPerThread of its estimated single-core time, at least 1, at most the calling thread's
// limit (the session's threads). KILN_CPU_MIN_US_PER_THREAD=0 gives every primitive the limit.
int threads_for_work(double flops, double bytes);

// Lowers the calling thread's OpenMP thread limit to `threads` while in scope (never raises it).
// oneDNN sizes a primitive's partition by that limit when it creates the primitive and opens its
// regions with as many threads when it runs it: hold the same limit around both.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace kiln::backends::cpu
