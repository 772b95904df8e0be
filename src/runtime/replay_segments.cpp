#include "runtime/replay_segments.hpp"

#include <set>

#include "runtime/placement.hpp"

namespace kiln::runtime {
namespace {

// A kernel step on a device whose outputs all have space in that device's arena: recorded
// work must never allocate (an allocation is not work a stream can record).
bool recordable_kernel(const ExecutionPlan& plan, const PlanStep& s) {
  if (s.kind != StepKind::Kernel || !s.backend || is_host(s.backend)) return false;
  for (int v : s.outputs) {
    if (v < 0) continue;
    const ArenaRange& r = plan.ranges()[v];
    if (r.arena < 0 || plan.arenas()[r.arena].backend != s.backend) return false;
  }
  return true;
}

// A view of a value in `device`'s memory: it moves no data, so it may sit inside a segment.
bool device_view(const ExecutionPlan& plan, const PlanStep& s, const backends::Backend* device) {
  return s.kind == StepKind::View && !s.inputs.empty() && s.inputs[0] >= 0 &&
         plan.values()[s.inputs[0]].device == device;
}

}  // namespace

std::vector<ReplaySegment> find_replay_segments(const ExecutionPlan& plan) {
  const std::vector<PlanStep>& steps = plan.steps();
  std::vector<ReplaySegment> out;
  size_t i = 0;
  while (i < steps.size()) {
    if (!recordable_kernel(plan, steps[i])) {
      ++i;
      continue;
    }
    ReplaySegment seg;
    seg.first = i;
    seg.backend = steps[i].backend;
    size_t last_kernel = i;
    size_t j = i;
    for (; j < steps.size(); ++j) {
      const PlanStep& s = steps[j];
      if (recordable_kernel(plan, s) && s.backend == seg.backend) {
        last_kernel = j;
        ++seg.kernels;
      } else if (!device_view(plan, s, seg.backend)) {
        break;
      }
    }
    seg.last = last_kernel;  // trailing views run after the segment, as usual
    if (seg.kernels >= 2) {
      std::set<int> produced;
      for (size_t k = seg.first; k <= seg.last; ++k) {
        for (int v : steps[k].outputs) {
          if (v >= 0) produced.insert(v);
        }
      }
      std::set<int> reads;
      for (size_t k = seg.first; k <= seg.last; ++k) {
        for (int v : steps[k].inputs) {
          // Constants are the same device memory every run (uploaded once at open): no need
          // to compare them before each replay, unless a feed may replace one.
          if (v >= 0 && !produced.count(v) &&
              (plan.constants()[v].is_none() || plan.overridable_upload(v)))
            reads.insert(v);
        }
      }
      seg.reads.assign(reads.begin(), reads.end());
      seg.produced.assign(produced.begin(), produced.end());
      out.push_back(std::move(seg));
    }
    i = last_kernel + 1;
  }
  return out;
}

}  // namespace kiln::runtime
