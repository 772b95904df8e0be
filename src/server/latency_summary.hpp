#pragma once
// Per model-version latency summaries (Prometheus summaries: quantiles over a sliding window,
// plus count and sum) for `--metrics-config summary_latencies=true`, kept with prometheus-cpp's
// Summary as tritonserver keeps them: a 60 s window in 5 age buckets, CKMS targeted quantiles.
//
// Beside Triton's five (request, queue, compute input / infer / output) Kiln keeps one of its
// own: the overhead of each request, its request duration minus its compute infer duration,
// i.e. everything the server does around running the model (decode, queueing and hand-off,
// batching, input concatenation, output split). Its median is issue 4's "server overhead".
#include <array>
#include <cstdint>
#include <memory>

#include <prometheus/client_metric.h>
#include <prometheus/summary.h>

#include "server/metrics_options.hpp"

namespace kiln::server {

enum class LatencyKind : size_t {
  Request,
  Queue,
  ComputeInput,
  ComputeInfer,
  ComputeOutput,
  Overhead,  // Kiln's own: request - compute infer
};
inline constexpr size_t kLatencyKinds = 6;

struct LatencySummaryFamily {
  const char* name;
  const char* help;
};
// Metric name and help of each kind, in LatencyKind order.
const std::array<LatencySummaryFamily, kLatencyKinds>& latency_summary_families();

class LatencySummaries {
 public:
  explicit LatencySummaries(const std::vector<SummaryQuantile>& quantiles);
  // One successful request's phases, in nanoseconds (observed in microseconds).
  void observe(uint64_t request_ns, uint64_t queue_ns, uint64_t input_ns, uint64_t infer_ns,
               uint64_t output_ns);
  // Quantiles, count and sum of one kind (labels left to the caller).
  prometheus::ClientMetric collect(LatencyKind kind) const;

 private:
  std::array<std::unique_ptr<prometheus::Summary>, kLatencyKinds> summaries_;
};

}  // namespace kiln::server
