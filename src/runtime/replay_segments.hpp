#pragma once
// Stretches of an execution plan that a device records once and replays (CUDA / HIP graphs):
// consecutive kernel steps on one device (with the views between them), whose every output has
// its planned space in that device's arena. Replaying such a stretch repeats the recorded
// kernels on the same memory, so the executor replays only while each value read from outside
// it has the pointer and dims it had when recorded; the outputs are then where the recording
// wrote them. Launching a plan's many small kernels one by one costs the host several
// microseconds each; a replay costs one launch.
#include <cstddef>
#include <vector>

#include "runtime/execution_plan.hpp"

namespace kiln::runtime {

struct ReplaySegment {
  size_t first = 0, last = 0;  // plan step indices, inclusive
  backends::Backend* backend = nullptr;
  // Plan values its steps read that are produced outside it, constants left out (their memory
  // is the same every run).
  std::vector<int> reads;
  std::vector<int> produced;  // plan values its steps write
  size_t kernels = 0;         // kernel steps in it
};

// The plan's segments, in step order, each of at least two kernel steps on a device that is not
// the host.
std::vector<ReplaySegment> find_replay_segments(const ExecutionPlan& plan);

}  // namespace kiln::runtime
