#pragma once
// Per model-version statistics, counted as Triton counts them so that the statistics endpoint
// (HTTP JSON and gRPC ModelStatisticsResponse) and the Prometheus metrics read the same numbers.
//
// Per request: success / fail (count + cumulative request duration), queue, compute_input,
// compute_infer, compute_output (a request in a batch is charged the whole batch's compute time,
// as Triton does). Per execution: execution_count and, keyed by batch size, batch_stats.
// inference_count sums the batch size of every successful request.
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "server/latency_summary.hpp"

namespace kiln::server {

struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};

struct InferStatistics {
  DurationStat success, fail, queue, compute_input, compute_infer, compute_output;
  // Response cache (response_cache.hpp): a hit is a success that ran nothing, timed by its
  // lookup; a miss is timed by its lookup and insertion.
  DurationStat cache_hit, cache_miss;
};

// Why a request failed, as the `reason` label of tritonserver's nv_inference_request_failure:
// refused by the scheduler (queue full, queue timeout), cancelled, failed in the model, other.
enum class FailureReason : uint8_t { Other, Backend, Canceled, Rejected };
inline constexpr std::array<const char*, 4> kFailureReasonNames = {"OTHER", "BACKEND", "CANCELED",
                                                                   "REJECTED"};

struct BatchStatistics {
  uint64_t batch_size = 0;
  DurationStat compute_input, compute_infer, compute_output;
};

// A consistent copy for the frontends.
struct StatisticsSnapshot {
  uint64_t last_inference_ms = 0;  // ms since the epoch of the last success; 0 before the first
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  InferStatistics inference;
  std::array<uint64_t, 4> failures{};           // inference.fail.count by FailureReason
  std::map<uint64_t, BatchStatistics> batches;  // by batch size
  int64_t pending = 0;                          // queued or executing requests now
};

class ModelStatistics {
 public:
  // Latency summaries are kept only when `metrics.summary_latencies` asks for them.
  explicit ModelStatistics(const MetricsOptions& metrics = {});

  // One successful request: its batch size (1 for models without batching), end-to-end duration
  // and the phases it went through.
  void record_success(uint64_t batch_size, uint64_t request_ns, uint64_t queue_ns,
                      uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns);
  // A request answered from the response cache: a success (request_ns end to end) and a hit
  // (lookup_ns); it ran nothing, so inference and execution counts stay.
  void record_cache_hit(uint64_t request_ns, uint64_t lookup_ns);
  // A request the cache did not hold: its lookup and insertion time.
  void record_cache_miss(uint64_t ns);
  // One failed request (refused, timed out or failed in execution).
  void record_failure(uint64_t request_ns, FailureReason reason);
  // One model execution of `batch_size` (summed over the requests merged into it).
  void record_execution(uint64_t batch_size, uint64_t input_ns, uint64_t infer_ns,
                        uint64_t output_ns);
  void add_pending(int64_t delta) { pending_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t pending() const { return pending_.load(std::memory_order_relaxed); }

  StatisticsSnapshot snapshot() const;
  // Null unless summary latencies are enabled.
  const LatencySummaries* summaries() const { return summaries_.get(); }

 private:
  mutable std::mutex mutex_;
  StatisticsSnapshot stats_;
  std::atomic<int64_t> pending_{0};
  std::unique_ptr<LatencySummaries> summaries_;  // thread-safe on its own
};

}  // namespace kiln::server
