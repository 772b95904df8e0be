#pragma once
// What the metrics endpoint publishes for request latencies, set with tritonserver's
// `--metrics-config <setting>=<value>` (repeatable): `counter_latencies` (the cumulative
// nv_inference_*_duration_us counters, on by default), `summary_latencies` (the
// nv_inference_*_summary_us Prometheus summaries over a sliding window, off by default) and
// `summary_quantiles` ("<quantile>:<error>,..." for those summaries).
#include <string_view>
#include <vector>

namespace kiln::server {

struct SummaryQuantile {
  double quantile = 0;
  double error = 0;  // the rank error the estimate may have (CKMS targeted quantiles)
};

struct MetricsOptions {
  bool cpu = true;  // --allow-cpu-metrics: nv_cpu_utilization and the CPU memory gauges
  bool gpu = true;  // --allow-gpu-metrics: the GPU gauges (server/gpu_metrics.hpp)
  bool counter_latencies = true;
  bool summary_latencies = false;
  // tritonserver's defaults.
  std::vector<SummaryQuantile> quantiles = {
      {0.5, 0.05}, {0.9, 0.01}, {0.95, 0.001}, {0.99, 0.001}, {0.999, 0.001}};
};

// Applies one `--metrics-config` value. A malformed value, an unknown setting or a quantile
// outside (0, 1) is InvalidArgument naming it. tritonserver's per-group form
// ("<group>,<setting>=<value>") is accepted for the global group only.
void apply_metrics_config(MetricsOptions& options, std::string_view spec);

}  // namespace kiln::server
