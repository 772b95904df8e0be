#include "server/sla_controller.hpp"

#include <algorithm>
#include <cmath>

namespace kiln::server {
namespace {

// Weight of the newest execution in a batch size's average: about the last ten count, so the
// model follows a machine that gets busier without jumping at one slow run.
constexpr double kComputeWeight = 0.2;
// The feedback band, as fractions of the objective: above kHigh the p99 is too close to it;
// below kLow there is room to trade latency for batch size or admissions.
constexpr double kHigh = 0.9;
constexpr double kLow = 0.7;
// The admission limit as a fraction of the objective: where it starts, and its bounds. It starts
// below 1 because the estimate is a typical latency and the objective a p99.
constexpr double kStartFraction = 0.8;
constexpr double kMinFraction = 0.2;
constexpr double kMaxFraction = 1.0;
// The fewest new requests the p99 is judged on (with fewer than 100 it is their maximum).
constexpr size_t kMinSamples = 16;
// How fast the arrival rate per level forgets: about the last second counts.
constexpr double kArrivalDecayNs = 1e9;
// Higher levels never get more than this share of the instances in the estimate, so a level
// under a flood from above is estimated slow, not infinitely slow.
constexpr double kMaxHigherShare = 0.9;

double ns_since(Clock::time_point from, Clock::time_point to) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

}  // namespace

// ---- ComputeTimeModel -------------------------------------------------------------------------

ComputeTimeModel::ComputeTimeModel(int64_t max_rows)
    : ns_(static_cast<size_t>(std::max<int64_t>(1, max_rows)) + 1, 0.0) {}

int64_t ComputeTimeModel::clamp(int64_t rows) const {
  return std::clamp<int64_t>(rows, 1, static_cast<int64_t>(ns_.size()) - 1);
}

void ComputeTimeModel::record(int64_t rows, uint64_t ns) {
  double& avg = ns_[static_cast<size_t>(clamp(rows))];
  const double x = std::max(1.0, static_cast<double>(ns));
  avg = avg == 0 ? x : avg + kComputeWeight * (x - avg);
  measured_ = true;
}

double ComputeTimeModel::estimate_ns(int64_t rows) const {
  if (!measured_) return 0;
  const int64_t n = clamp(rows);
  if (ns_[n] > 0) return ns_[n];
  int64_t lo = n - 1, hi = n + 1;
  while (lo >= 1 && ns_[lo] == 0) --lo;
  while (hi < static_cast<int64_t>(ns_.size()) && ns_[hi] == 0) ++hi;
  const bool has_lo = lo >= 1, has_hi = hi < static_cast<int64_t>(ns_.size());
  if (has_lo && has_hi) {
    const double t = static_cast<double>(n - lo) / static_cast<double>(hi - lo);
    return ns_[lo] + t * (ns_[hi] - ns_[lo]);
  }
  if (has_lo) return ns_[lo] * static_cast<double>(n) / static_cast<double>(lo);
  return ns_[hi];
}

double ComputeTimeModel::per_row_ns(int64_t rows) const {
  if (!measured_) return 0;
  const int64_t n = clamp(rows);
  for (int64_t d = 0; d < static_cast<int64_t>(ns_.size()); ++d) {
    // Ties go to the larger size, whose per-row cost is the one a backlog drains at.
    for (int64_t k : {n + d, n - d}) {
      if (k >= 1 && k < static_cast<int64_t>(ns_.size()) && ns_[k] > 0) {
        return ns_[k] / static_cast<double>(k);
      }
    }
  }
  return 0;
}

// ---- LatencyWindow ----------------------------------------------------------------------------

LatencyWindow::LatencyWindow(size_t capacity) : ring_(std::max<size_t>(1, capacity)) {}

void LatencyWindow::add(Clock::time_point arrived, uint64_t latency_ns) {
  ring_[next_] = Sample{arrived, latency_ns};
  next_ = (next_ + 1) % ring_.size();
  size_ = std::min(size_ + 1, ring_.size());
}

LatencyWindow::Quantile LatencyWindow::p99_since(Clock::time_point since) const {
  std::vector<uint64_t> values;
  values.reserve(size_);
  for (size_t i = 0; i < size_; ++i) {
    if (ring_[i].arrived >= since) values.push_back(ring_[i].latency_ns);
  }
  Quantile q;
  q.count = values.size();
  if (values.empty()) return q;
  // Nearest rank: the smallest value with at least 99% of the samples at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(values.size())));
  auto nth = values.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(values.begin(), nth, values.end());
  q.ns = *nth;
  return q;
}

// ---- SlaController ----------------------------------------------------------------------------

SlaController::SlaController(SlaSettings settings)
    : settings_(std::move(settings)),
      compute_(settings_.max_rows),
      limit_fraction_(kStartFraction),
      refused_(std::max<size_t>(1, settings_.levels), 0),
      arrived_rows_(std::max<size_t>(1, settings_.levels), 0.0) {
  settings_.instances = std::max<size_t>(1, settings_.instances);
  settings_.batch_rows = std::max<int64_t>(1, settings_.batch_rows);
  // A quarter of the objective: several judgements fit in the time one late request takes to
  // show, and the 5 ms floor keeps tiny objectives from judging on a handful of executions.
  const uint64_t quarter = settings_.objective_ns / 4;
  interval_ = std::chrono::nanoseconds(std::clamp<uint64_t>(quarter, 5'000'000, 250'000'000));
}

uint64_t SlaController::limit_ns() const {
  return static_cast<uint64_t>(limit_fraction_ * static_cast<double>(settings_.objective_ns));
}

void SlaController::decay_arrivals(Clock::time_point now) {
  if (now <= arrivals_at_) return;
  const double keep = std::exp(-ns_since(arrivals_at_, now) / kArrivalDecayNs);
  for (double& rows : arrived_rows_) rows *= keep;
  arrivals_at_ = now;
}

SlaDecision SlaController::admit(size_t level, int64_t rows, const SlaLoad& load,
                                 Clock::time_point now) {
  decay_arrivals(now);
  level = std::min(level, arrived_rows_.size() - 1);
  SlaDecision d;
  d.limit_ns = limit_ns();
  int64_t queued_all = 0;
  for (size_t l = 0; l < load.queued_rows.size(); ++l) {
    queued_all += load.queued_rows[l];
    if (l <= level) d.rows_ahead += load.queued_rows[l];
  }
  size_t busy = 0;
  for (const SlaLoad::Running& r : load.running) busy += r.rows > 0 ? 1 : 0;
  const bool instance_free = busy < settings_.instances;
  // Nothing measured yet: nothing to estimate with. Nothing ahead and an instance free: the
  // request starts at once, and refusing it could make nothing faster.
  if (compute_.measured() && !(d.rows_ahead == 0 && instance_free)) {
    const int64_t full = settings_.batch_rows;
    double residual = 0;
    for (const SlaLoad::Running& r : load.running) {
      if (r.rows == 0) continue;
      residual += std::max(0.0, compute_.estimate_ns(r.rows) - ns_since(r.start, now));
    }
    // The rows ahead that fill whole batches before the request's own; the rest share its batch.
    const int64_t sharing = d.rows_ahead % full;
    const double per_row = compute_.per_row_ns(full);
    double drain = (residual + static_cast<double>(d.rows_ahead - sharing) * per_row) /
                   static_cast<double>(settings_.instances);
    // Requests of higher levels that arrive meanwhile go first: only the instances' time they
    // leave over drains this level's backlog.
    double higher_rows_per_ns = 0;
    for (size_t l = 0; l < level; ++l) higher_rows_per_ns += arrived_rows_[l] / kArrivalDecayNs;
    const double higher_share = std::min(
        kMaxHigherShare, higher_rows_per_ns * per_row / static_cast<double>(settings_.instances));
    drain /= 1.0 - higher_share;
    const double own = compute_.estimate_ns(std::min(full, sharing + rows));
    const double wait = queued_all + rows < full ? static_cast<double>(delay_ns_) : 0.0;
    d.estimate_ns = static_cast<uint64_t>(drain + own + wait);
    if (d.estimate_ns > d.limit_ns) {
      d.admit = false;
      // The work ahead drains as fast as time passes: the estimate falls under the limit after
      // the excess, if no more arrives ahead of it meanwhile.
      d.retry_after_ns = d.estimate_ns - d.limit_ns;
      ++refused_[level];
      ++refused_since_change_;
      return d;
    }
  }
  arrived_rows_[level] += static_cast<double>(rows);
  return d;
}

void SlaController::record_execution(int64_t rows, uint64_t busy_ns) {
  compute_.record(rows, busy_ns);
}

void SlaController::record_latency(Clock::time_point arrived, uint64_t latency_ns) {
  window_.add(arrived, latency_ns);
}

void SlaController::update(Clock::time_point now) {
  if (now - last_update_ < interval_) return;
  last_update_ = now;
  const LatencyWindow::Quantile q = window_.p99_since(last_change_);
  if (q.count < kMinSamples) return;
  p99_ns_ = q.ns;
  const double objective = static_cast<double>(settings_.objective_ns);
  const double p99 = static_cast<double>(q.ns);
  bool changed = false;
  if (p99 > kHigh * objective) {
    // Back off fast: halve the delay (to none once it is a sliver of its range) and tighten the
    // admission limit.
    if (delay_ns_ > 0) {
      delay_ns_ /= 2;
      if (delay_ns_ < settings_.max_delay_ns / 64) delay_ns_ = 0;
      changed = true;
    }
    if (limit_fraction_ > kMinFraction) {
      limit_fraction_ = std::max(kMinFraction, limit_fraction_ * 0.8);
      changed = true;
    }
  } else if (p99 < kLow * objective) {
    // Grow carefully: a sixteenth of the range or a quarter more, whichever is larger.
    if (delay_ns_ < settings_.max_delay_ns) {
      delay_ns_ = std::min(settings_.max_delay_ns,
                           std::max(delay_ns_ + settings_.max_delay_ns / 16, delay_ns_ * 5 / 4));
      changed = true;
    }
    // Loosen the limit only while it refuses requests: without refusals it decides nothing,
    // and a limit left loose through a quiet spell would let the next burst run late.
    if (refused_since_change_ > 0 && limit_fraction_ < kMaxFraction) {
      limit_fraction_ = std::min(kMaxFraction, limit_fraction_ + 0.05);
      changed = true;
    }
  }
  if (changed) {
    last_change_ = now;
    refused_since_change_ = 0;
  }
}

SlaSnapshot SlaController::snapshot() const {
  SlaSnapshot s;
  s.objective_ns = settings_.objective_ns;
  s.delay_ns = delay_ns_;
  s.limit_ns = limit_ns();
  s.p99_ns = p99_ns_;
  s.refused = refused_;
  return s;
}

}  // namespace kiln::server
