#pragma once
// SLA-aware scheduling of one model version: the controller behind a latency objective
// (latency_objective.hpp, docs/SERVER.md "Latency objective (SLA)"). Plain logic with the time
// passed in, so unit tests drive it without clocks or threads; the Scheduler owns one and calls
// it under its own lock.
//
// It has three parts:
// - ComputeTimeModel: how long an instance is busy with a batch of n rows, measured from the
//   executions themselves (a moving average per batch size, interpolated between sizes).
// - Admission: an arriving request's end-to-end latency is estimated as the work ahead of it
//   (queued at its own and higher priority levels, plus what the instances are still running)
//   drained by the instances at the measured full-batch throughput, slowed by the share of the
//   instances that higher levels' arrivals take, plus its own batch's compute time. A request
//   whose estimate passes the admission limit is refused at once, with a hint of when the work
//   ahead will have drained enough; waiting could only make it, and those behind it, late.
// - Feedback: the estimate is a mean and the objective a p99, so the limit is a fraction of the
//   objective that the measured p99 adjusts, and so is the batcher's queue delay. At most once
//   per update interval, the p99 of the requests that arrived since the last change is compared
//   with the objective: above 90% of it, the delay halves and the limit tightens; below 70%, the
//   delay grows (bigger batches, more throughput) and, while requests are being refused, the
//   limit loosens. Judging only requests that arrived after the last change keeps one burst of
//   late requests from being answered twice.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "server/infer_types.hpp"

namespace kiln::server {

// Busy time of an instance per batch size, from the executions measured so far.
class ComputeTimeModel {
 public:
  // Batch sizes 1..max_rows (a model without a batch dim runs 1).
  explicit ComputeTimeModel(int64_t max_rows);
  void record(int64_t rows, uint64_t ns);
  bool measured() const { return measured_; }
  // A batch of `rows`: the measured average, else interpolated between the nearest measured
  // sizes, else scaled linearly from the nearest smaller one (batching never assumed to help
  // before it is measured), else the nearest larger one's. 0 before any measurement.
  double estimate_ns(int64_t rows) const;
  // Busy time per row near `rows`: the nearest measured size's time over its rows.
  double per_row_ns(int64_t rows) const;

 private:
  int64_t clamp(int64_t rows) const;
  std::vector<double> ns_;  // index: rows; 0: not measured
  bool measured_ = false;
};

// The end-to-end latencies of recent requests with their arrival times (a bounded ring).
class LatencyWindow {
 public:
  explicit LatencyWindow(size_t capacity = 2048);
  void add(Clock::time_point arrived, uint64_t latency_ns);
  struct Quantile {
    size_t count = 0;
    uint64_t ns = 0;
  };
  // The p99 (nearest rank) of the samples that arrived at or after `since`.
  Quantile p99_since(Clock::time_point since) const;

 private:
  struct Sample {
    Clock::time_point arrived;
    uint64_t latency_ns = 0;
  };
  std::vector<Sample> ring_;
  size_t next_ = 0;
  size_t size_ = 0;
};

struct SlaSettings {
  uint64_t objective_ns = 0;
  uint64_t max_delay_ns = 0;  // the most the queue delay may grow to (0: never delays)
  int64_t batch_rows = 1;     // rows one execution merges (max_batch_size when batching, else 1)
  int64_t max_rows = 1;       // the largest batch an execution runs
  size_t instances = 1;
  size_t levels = 1;  // priority levels (index 0 highest)
};

// What is queued and running when a request arrives.
struct SlaLoad {
  struct Running {
    int64_t rows = 0;
    Clock::time_point start;
  };
  std::span<const int64_t> queued_rows;  // per priority level, index 0 highest
  std::span<const Running> running;      // per instance: its batch now (0 rows: idle)
};

struct SlaDecision {
  bool admit = true;
  uint64_t estimate_ns = 0;     // the request's estimated end-to-end latency (0: not estimated)
  uint64_t limit_ns = 0;        // what the estimate was held against
  uint64_t retry_after_ns = 0;  // refused: when the work ahead should have drained enough
  int64_t rows_ahead = 0;       // queued at the request's level or higher
};

struct SlaSnapshot {
  uint64_t objective_ns = 0;
  uint64_t delay_ns = 0;          // the queue delay the batcher uses now
  uint64_t limit_ns = 0;          // the admission limit now
  uint64_t p99_ns = 0;            // the last p99 measured (0 before the first)
  std::vector<uint64_t> refused;  // per priority level
};

class SlaController {
 public:
  explicit SlaController(SlaSettings settings);

  // The queue delay the batcher waits for a batch to fill, from the oldest request's arrival.
  uint64_t queue_delay_ns() const { return delay_ns_; }
  // Decides on an arriving request of `rows` at priority `level`; counts what it admits (the
  // arrival rate per level) and refuses.
  SlaDecision admit(size_t level, int64_t rows, const SlaLoad& load, Clock::time_point now);
  // One execution's busy time, for the compute model.
  void record_execution(int64_t rows, uint64_t busy_ns);
  // One successful request's end-to-end latency.
  void record_latency(Clock::time_point arrived, uint64_t latency_ns);
  // The feedback step; cheap to call after every execution (it acts once per interval).
  void update(Clock::time_point now);
  SlaSnapshot snapshot() const;

  const ComputeTimeModel& compute() const { return compute_; }
  uint64_t limit_ns() const;

 private:
  void decay_arrivals(Clock::time_point now);

  SlaSettings settings_;
  ComputeTimeModel compute_;
  LatencyWindow window_;
  uint64_t delay_ns_ = 0;
  double limit_fraction_;
  uint64_t p99_ns_ = 0;
  Clock::duration interval_;
  Clock::time_point last_update_{};
  Clock::time_point last_change_{};
  uint64_t refused_since_change_ = 0;
  std::vector<uint64_t> refused_;
  std::vector<double> arrived_rows_;  // per level, decayed with kArrivalDecay
  Clock::time_point arrivals_at_{};
};

}  // namespace kiln::server
