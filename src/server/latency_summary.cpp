#include "server/latency_summary.hpp"

namespace kiln::server {

const std::array<LatencySummaryFamily, kLatencyKinds>& latency_summary_families() {
  // Triton's names and help texts (its compute summaries reuse the counters' help).
  static const std::array<LatencySummaryFamily, kLatencyKinds> families{{
      {"nv_inference_request_summary_us",
       "Summary of inference request duration in microseconds (includes cached requests)"},
      {"nv_inference_queue_summary_us",
       "Summary of inference queuing duration in microseconds (includes cached requests)"},
      {"nv_inference_compute_input_summary_us",
       "Cumulative compute input duration in microseconds (does not include cached requests)"},
      {"nv_inference_compute_infer_summary_us",
       "Cumulative compute inference duration in microseconds (does not include cached "
       "requests)"},
      {"nv_inference_compute_output_summary_us",
       "Cumulative inference compute output duration in microseconds (does not include cached "
       "requests)"},
      {"kiln_inference_overhead_summary_us",
       "Summary of inference request duration minus compute inference duration in "
       "microseconds: the server's overhead around the model (Kiln)"},
  }};
  return families;
}

LatencySummaries::LatencySummaries(const std::vector<SummaryQuantile>& quantiles) {
  prometheus::Summary::Quantiles q;
  for (const SummaryQuantile& s : quantiles) q.emplace_back(s.quantile, s.error);
  for (auto& summary : summaries_) summary = std::make_unique<prometheus::Summary>(q);
}

void LatencySummaries::observe(uint64_t request_ns, uint64_t queue_ns, uint64_t input_ns,
                               uint64_t infer_ns, uint64_t output_ns) {
  const uint64_t overhead_ns = request_ns > infer_ns ? request_ns - infer_ns : 0;
  const uint64_t values[kLatencyKinds] = {request_ns, queue_ns,  input_ns,
                                          infer_ns,   output_ns, overhead_ns};
  for (size_t k = 0; k < kLatencyKinds; ++k) {
    summaries_[k]->Observe(static_cast<double>(values[k]) / 1000.0);
  }
}

prometheus::ClientMetric LatencySummaries::collect(LatencyKind kind) const {
  return summaries_[static_cast<size_t>(kind)]->Collect();
}

}  // namespace kiln::server
