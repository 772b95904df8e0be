// --metrics-config parsing, the latency summaries behind `summary_latencies=true`, and the GPU
// gauges' exposition.
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.hpp"
#include "server/gpu_metrics.hpp"
#include "server/latency_summary.hpp"
#include "server/metrics_options.hpp"
#include "server/statistics.hpp"

namespace kiln::server {
namespace {

TEST(ServerMetrics, ConfigDefaultsAreTritons) {
  MetricsOptions o;
  EXPECT_TRUE(o.counter_latencies);
  EXPECT_FALSE(o.summary_latencies);
  ASSERT_EQ(o.quantiles.size(), 5u);
  EXPECT_DOUBLE_EQ(o.quantiles[0].quantile, 0.5);
  EXPECT_DOUBLE_EQ(o.quantiles[0].error, 0.05);
  EXPECT_DOUBLE_EQ(o.quantiles[4].quantile, 0.999);
}

// Triton's names, one sample per GPU under its uuid; a value a device does not report leaves
// its sample out, and a family no device reports is not published at all.
TEST(ServerMetrics, GpuReadingsRenderUnderTritonsNames) {
  GpuReading a;
  a.uuid = "GPU-0001";
  a.utilization = 0.25;
  a.memory_total_bytes = 150000000000ull;
  a.memory_used_bytes = 1024;
  a.power_watts = 123.5;
  a.power_limit_watts = 700;
  a.energy_joules = 42;
  GpuReading b;
  b.uuid = "GPU-0002";
  b.utilization = 1.0;
  const std::string text = render_gpu_metrics({a, b});
  EXPECT_NE(text.find("# TYPE nv_gpu_utilization gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nv_gpu_utilization{gpu_uuid=\"GPU-0001\"} 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("nv_gpu_utilization{gpu_uuid=\"GPU-0002\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-0001\"} 150000000000\n"),
            std::string::npos);
  EXPECT_NE(text.find("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-0001\"} 1024\n"), std::string::npos);
  EXPECT_EQ(text.find("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-0002\"}"), std::string::npos);
  EXPECT_NE(text.find("nv_gpu_power_usage{gpu_uuid=\"GPU-0001\"} 123.5\n"), std::string::npos);
  EXPECT_NE(text.find("nv_gpu_power_limit{gpu_uuid=\"GPU-0001\"} 700\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE nv_energy_consumption counter\n"), std::string::npos);
  EXPECT_NE(text.find("nv_energy_consumption{gpu_uuid=\"GPU-0001\"} 42\n"), std::string::npos);
  EXPECT_EQ(render_gpu_metrics({b}).find("nv_gpu_power_usage"), std::string::npos);
  EXPECT_EQ(render_gpu_metrics({}), "");
}

TEST(ServerMetrics, ConfigSettings) {
  MetricsOptions o;
  apply_metrics_config(o, "summary_latencies=true");
  apply_metrics_config(o, "counter_latencies=0");
  apply_metrics_config(o, "summary_quantiles=\"0.5:0.05,0.99:0.001\"");
  EXPECT_TRUE(o.summary_latencies);
  EXPECT_FALSE(o.counter_latencies);
  ASSERT_EQ(o.quantiles.size(), 2u);
  EXPECT_DOUBLE_EQ(o.quantiles[1].quantile, 0.99);
  EXPECT_DOUBLE_EQ(o.quantiles[1].error, 0.001);
  // tritonserver's per-group form, global group.
  apply_metrics_config(o, ",summary_latencies=false");
  EXPECT_FALSE(o.summary_latencies);
}

TEST(ServerMetrics, ConfigErrors) {
  MetricsOptions o;
  expect_error([&] { apply_metrics_config(o, "summary_latencies"); }, ErrorCode::InvalidArgument,
               "is not <setting>=<value>");
  expect_error([&] { apply_metrics_config(o, "summary_latencies=yes please"); },
               ErrorCode::InvalidArgument, "is not true or false");
  expect_error([&] { apply_metrics_config(o, "summary_quantiles=0.5:0.05,0.9"); },
               ErrorCode::InvalidArgument, "'0.9' is not <quantile>:<error>");
  expect_error([&] { apply_metrics_config(o, "summary_quantiles=0:0.05"); },
               ErrorCode::InvalidArgument, "quantile '0' is not a number in (0, 1)");
  expect_error([&] { apply_metrics_config(o, "summary_quantiles="); }, ErrorCode::InvalidArgument,
               "no quantile given");
  expect_error([&] { apply_metrics_config(o, "cache,hit=1"); }, ErrorCode::InvalidArgument,
               "only global settings");
  expect_error([&] { apply_metrics_config(o, "bogus=1"); }, ErrorCode::InvalidArgument,
               "unknown setting 'bogus'");
}

TEST(ServerMetrics, SummariesTrackEachPhaseAndTheOverhead) {
  LatencySummaries s({{0.5, 0.05}, {0.99, 0.001}});
  // 100 requests: request 100+i us, of which compute infer 10 us and queue i us.
  for (uint64_t i = 0; i < 100; ++i) {
    s.observe((100 + i) * 1000, i * 1000, 1000, 10000, 2000);
  }
  const prometheus::ClientMetric request = s.collect(LatencyKind::Request);
  EXPECT_EQ(request.summary.sample_count, 100u);
  EXPECT_DOUBLE_EQ(request.summary.sample_sum, 100 * 100 + 99 * 100 / 2);
  ASSERT_EQ(request.summary.quantile.size(), 2u);
  // CKMS: the median within 5% rank of the true one (149.5 us).
  EXPECT_NEAR(request.summary.quantile[0].value, 149.5, 5.5);
  const prometheus::ClientMetric overhead = s.collect(LatencyKind::Overhead);
  EXPECT_DOUBLE_EQ(overhead.summary.sample_sum, request.summary.sample_sum - 100 * 10);
  EXPECT_NEAR(overhead.summary.quantile[0].value, 139.5, 5.5);
  EXPECT_DOUBLE_EQ(s.collect(LatencyKind::ComputeInfer).summary.quantile[1].value, 10);
  EXPECT_DOUBLE_EQ(s.collect(LatencyKind::ComputeOutput).summary.sample_sum, 200);
  // A request shorter than its compute (clock granularity) counts as no overhead, not wrap-around.
  LatencySummaries t({{0.5, 0.05}});
  t.observe(5000, 0, 0, 6000, 0);
  EXPECT_DOUBLE_EQ(t.collect(LatencyKind::Overhead).summary.sample_sum, 0);
}

TEST(ServerMetrics, StatisticsKeepSummariesOnlyWhenAsked) {
  ModelStatistics off;
  EXPECT_EQ(off.summaries(), nullptr);
  MetricsOptions on;
  on.summary_latencies = true;
  ModelStatistics stats(on);
  ASSERT_NE(stats.summaries(), nullptr);
  stats.record_success(1, 50000, 20000, 1000, 10000, 1000);
  EXPECT_EQ(stats.summaries()->collect(LatencyKind::Queue).summary.sample_count, 1u);
  EXPECT_EQ(stats.snapshot().inference.success.count, 1u);
  // An empty window reports NaN quantiles, as Prometheus summaries do.
  LatencySummaries empty({{0.5, 0.05}});
  EXPECT_TRUE(std::isnan(empty.collect(LatencyKind::Request).summary.quantile[0].value));
}

}  // namespace
}  // namespace kiln::server
