// The latency objective (docs/SERVER.md "Latency objective (SLA)"): the controller's compute
// model, latency window, admission and feedback, driven with a fake clock; the config
// parameter's checks.
#include <gtest/gtest.h>

#include "expect_error.hpp"
#include "server/latency_objective.hpp"
#include "server/sla_controller.hpp"

namespace kiln::server {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMs = 1'000'000;

Clock::time_point at(int64_t ms) {
  return Clock::time_point{} + std::chrono::hours(1) + milliseconds(ms);
}

TEST(SlaCompute, AveragesInterpolatesAndScales) {
  ComputeTimeModel m(8);
  EXPECT_FALSE(m.measured());
  EXPECT_EQ(m.estimate_ns(4), 0);
  m.record(2, 20 * kMs);
  m.record(8, 50 * kMs);
  EXPECT_DOUBLE_EQ(m.estimate_ns(2), 20.0 * kMs);
  EXPECT_DOUBLE_EQ(m.estimate_ns(5), 35.0 * kMs);   // between 2 and 8
  EXPECT_DOUBLE_EQ(m.estimate_ns(1), 20.0 * kMs);   // below: the smallest measured
  EXPECT_DOUBLE_EQ(m.estimate_ns(99), 50.0 * kMs);  // clamped to the largest batch
  EXPECT_DOUBLE_EQ(m.per_row_ns(8), 50.0 * kMs / 8);
  EXPECT_DOUBLE_EQ(m.per_row_ns(1), 10.0 * kMs);  // nearest measured: 2
  // A moving average: one slow run moves it, does not replace it.
  m.record(8, 150 * kMs);
  EXPECT_GT(m.estimate_ns(8), 50.0 * kMs);
  EXPECT_LT(m.estimate_ns(8), 150.0 * kMs);

  ComputeTimeModel only_small(16);
  only_small.record(4, 8 * kMs);
  // Above the largest measured size it scales linearly: batching is not assumed to help.
  EXPECT_DOUBLE_EQ(only_small.estimate_ns(16), 32.0 * kMs);
}

TEST(SlaWindow, P99OfTheSamplesSince) {
  LatencyWindow w(128);
  EXPECT_EQ(w.p99_since(at(0)).count, 0u);
  for (int i = 1; i <= 100; ++i) w.add(at(i), static_cast<uint64_t>(i) * kMs);
  LatencyWindow::Quantile q = w.p99_since(at(0));
  EXPECT_EQ(q.count, 100u);
  EXPECT_EQ(q.ns, 99 * kMs);
  q = w.p99_since(at(91));  // ten samples: the p99 is their largest
  EXPECT_EQ(q.count, 10u);
  EXPECT_EQ(q.ns, 100 * kMs);
  // The ring keeps the newest `capacity` samples.
  for (int i = 101; i <= 300; ++i) w.add(at(i), 1 * kMs);
  EXPECT_EQ(w.p99_since(at(0)).count, 128u);
  EXPECT_EQ(w.p99_since(at(0)).ns, 1 * kMs);
}

SlaSettings settings(size_t levels = 1) {
  SlaSettings s;
  s.objective_ns = 100 * kMs;
  s.max_delay_ns = 20 * kMs;
  s.batch_rows = 4;
  s.max_rows = 4;
  s.instances = 1;
  s.levels = levels;
  return s;
}

struct Load {
  std::vector<int64_t> queued;
  std::vector<SlaLoad::Running> running;
  SlaLoad view() const { return SlaLoad{queued, running}; }
};

TEST(SlaAdmission, AdmitsUntilTheEstimatePassesTheLimit) {
  SlaController c(settings());
  Load load{{400}, {{4, at(0)}}};
  // Nothing measured: nothing to estimate with, so everything is admitted.
  EXPECT_TRUE(c.admit(0, 1, load.view(), at(0)).admit);
  c.record_execution(4, 10 * kMs);  // 2.5 ms per row at full batches
  // An idle instance and nothing ahead: starts at once, always admitted.
  Load idle{{0}, {{0, at(0)}}};
  SlaDecision d = c.admit(0, 1, idle.view(), at(0));
  EXPECT_TRUE(d.admit);
  // 8 rows ahead (two batches, 20 ms) behind a batch that just started (10 ms) plus its own
  // batch (10 ms): 40 ms, under the starting limit (80% of 100 ms).
  Load some{{8}, {{4, at(0)}}};
  d = c.admit(0, 1, some.view(), at(0));
  EXPECT_TRUE(d.admit);
  EXPECT_EQ(d.estimate_ns, 40 * kMs);
  EXPECT_EQ(d.limit_ns, 80 * kMs);
  // 40 rows ahead: 10 + 100 + 10 ms, refused, the hint being the excess over the limit.
  Load many{{40}, {{4, at(0)}}};
  d = c.admit(0, 1, many.view(), at(0));
  EXPECT_FALSE(d.admit);
  EXPECT_EQ(d.estimate_ns, 120 * kMs);
  EXPECT_EQ(d.retry_after_ns, 40 * kMs);
  EXPECT_EQ(d.rows_ahead, 40);
  EXPECT_EQ(c.snapshot().refused, std::vector<uint64_t>{1});
  // The running batch's remaining time shrinks as it runs.
  EXPECT_EQ(c.admit(0, 1, some.view(), at(6)).estimate_ns, 34 * kMs);
}

TEST(SlaAdmission, PriorityLevelsSeeOnlyTheWorkAheadOfThem) {
  SlaController c(settings(2));
  c.record_execution(4, 10 * kMs);
  Load load{{0, 200}, {{4, at(0)}}};
  // Low priority waits behind 200 rows; high priority only behind the running batch.
  EXPECT_FALSE(c.admit(1, 1, load.view(), at(0)).admit);
  SlaDecision high = c.admit(0, 1, load.view(), at(0));
  EXPECT_TRUE(high.admit);
  EXPECT_EQ(high.estimate_ns, 20 * kMs);
  EXPECT_EQ(c.snapshot().refused, (std::vector<uint64_t>{0, 1}));
}

TEST(SlaAdmission, HigherLevelArrivalsSlowTheLowerLevelsDrain) {
  SlaController c(settings(2));
  c.record_execution(4, 10 * kMs);
  Load load{{0, 8}, {{4, at(0)}}};
  const uint64_t quiet = c.admit(1, 1, load.view(), at(0)).estimate_ns;
  // High-priority requests at 200 rows/s take half of the instance (2.5 ms per row).
  Load high{{0, 0}, {{0, at(0)}}};
  for (int i = 0; i < 1000; ++i) c.admit(0, 1, high.view(), at(1000 + i * 5));
  const uint64_t busy = c.admit(1, 1, load.view(), at(6000)).estimate_ns;
  EXPECT_GT(busy, quiet);
}

// Feeds `n` requests that arrived at `t` with latency `ms`, then lets the controller judge.
void feed(SlaController& c, int64_t t, int n, uint64_t ms) {
  for (int i = 0; i < n; ++i) c.record_latency(at(t), ms * kMs);
  c.update(at(t + 1));
}

TEST(SlaFeedback, DelayGrowsWhileTheObjectiveHoldsAndHalvesNearIt) {
  SlaController c(settings());
  EXPECT_EQ(c.queue_delay_ns(), 0u);
  int64_t t = 0;
  for (int step = 0; step < 40; ++step, t += 100) feed(c, t, 32, 10);
  EXPECT_EQ(c.queue_delay_ns(), 20 * kMs);  // grown to its bound
  EXPECT_EQ(c.snapshot().p99_ns, 10 * kMs);
  feed(c, t += 100, 32, 95);
  EXPECT_EQ(c.queue_delay_ns(), 10 * kMs);
  // The requests that arrived before the change are not judged again.
  for (int i = 0; i < 32; ++i) c.record_latency(at(t), 95 * kMs);
  c.update(at(t + 100));
  EXPECT_EQ(c.queue_delay_ns(), 10 * kMs);
  for (int step = 0; step < 10; ++step) feed(c, t += 100, 32, 95);
  EXPECT_EQ(c.queue_delay_ns(), 0u);
  // In the band between 70% and 90% of the objective it holds.
  feed(c, t += 100, 32, 80);
  EXPECT_EQ(c.queue_delay_ns(), 0u);
}

TEST(SlaFeedback, LimitTightensWhenLateAndLoosensOnlyWhileRefusing) {
  SlaController c(settings());
  c.record_execution(4, 10 * kMs);
  EXPECT_EQ(c.limit_ns(), 80 * kMs);
  feed(c, 0, 32, 120);
  EXPECT_EQ(c.limit_ns(), 64 * kMs);
  // Early requests without refusals leave the limit alone.
  feed(c, 100, 32, 10);
  EXPECT_EQ(c.limit_ns(), 64 * kMs);
  // With refusals it loosens.
  Load many{{400}, {{4, at(0)}}};
  EXPECT_FALSE(c.admit(0, 1, many.view(), at(150)).admit);
  feed(c, 200, 32, 10);
  EXPECT_EQ(c.limit_ns(), 69 * kMs);
  // Never below a fifth of the objective, never above it.
  for (int step = 0; step < 50; ++step) feed(c, 300 + step * 100, 32, 500);
  EXPECT_EQ(c.limit_ns(), 20 * kMs);
}

TEST(SlaFeedback, JudgesOncePerIntervalOnEnoughRequests) {
  SlaController c(settings());
  feed(c, 0, 8, 10);  // too few to judge
  EXPECT_EQ(c.queue_delay_ns(), 0u);
  EXPECT_EQ(c.snapshot().p99_ns, 0u);
  feed(c, 100, 8, 10);
  EXPECT_GT(c.queue_delay_ns(), 0u);
  const uint64_t delay = c.queue_delay_ns();
  // Within the interval (a quarter of the objective) nothing changes.
  for (int i = 0; i < 32; ++i) c.record_latency(at(102), 10 * kMs);
  c.update(at(110));
  EXPECT_EQ(c.queue_delay_ns(), delay);
}

ModelConfig config_with(const std::string& objective) {
  ModelConfig c;
  c.set_name("m");
  (*c.mutable_parameters())[kLatencyObjectiveParameter].set_string_value(objective);
  return c;
}

TEST(SlaConfig, ObjectiveParameter) {
  ModelConfig none;
  none.set_name("m");
  EXPECT_FALSE(latency_objective_ns(none).has_value());
  EXPECT_EQ(latency_objective_ns(config_with("50")), 50 * kMs);
  EXPECT_EQ(latency_objective_ns(config_with("2.5")), 2'500'000u);
  EXPECT_EQ(latency_objective_ns(config_with("1e3")), 1000 * kMs);
  for (const char* bad : {"", "fast", "50ms", "inf", "nan", "0x10", " 5", "5 "}) {
    expect_error([&] { latency_objective_ns(config_with(bad)); }, ErrorCode::InvalidArgument,
                 "is not a number of milliseconds");
  }
  for (const char* out : {"0", "-5", "0.001", "3600001", "1e300"}) {
    expect_error([&] { latency_objective_ns(config_with(out)); }, ErrorCode::InvalidArgument,
                 "must be in 0.01..3600000 ms");
  }
  ModelConfig ensemble = config_with("50");
  ensemble.set_platform("ensemble");
  expect_error([&] { validate_latency_objective(ensemble); }, ErrorCode::Unsupported, "ensemble");
  ModelConfig sequence = config_with("50");
  sequence.mutable_sequence_batching();
  expect_error([&] { validate_latency_objective(sequence); }, ErrorCode::Unsupported,
               "sequence_batching");
}

}  // namespace
}  // namespace kiln::server
