#include "server/statistics.hpp"

#include <chrono>

namespace kiln::server {
namespace {

void add(DurationStat& stat, uint64_t ns) {
  stat.count += 1;
  stat.ns += ns;
}

uint64_t now_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

}  // namespace

ModelStatistics::ModelStatistics(const MetricsOptions& metrics) {
  if (metrics.summary_latencies) summaries_ = std::make_unique<LatencySummaries>(metrics.quantiles);
}

void ModelStatistics::record_success(uint64_t batch_size, uint64_t request_ns, uint64_t queue_ns,
                                     uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns) {
  if (summaries_) summaries_->observe(request_ns, queue_ns, input_ns, infer_ns, output_ns);
  std::lock_guard lock(mutex_);
  add(stats_.inference.success, request_ns);
  add(stats_.inference.queue, queue_ns);
  add(stats_.inference.compute_input, input_ns);
  add(stats_.inference.compute_infer, infer_ns);
  add(stats_.inference.compute_output, output_ns);
  stats_.inference_count += batch_size;
  stats_.last_inference_ms = now_ms();
}

void ModelStatistics::record_cache_hit(uint64_t request_ns, uint64_t lookup_ns) {
  std::lock_guard lock(mutex_);
  add(stats_.inference.success, request_ns);
  add(stats_.inference.cache_hit, lookup_ns);
  stats_.last_inference_ms = now_ms();
}

void ModelStatistics::record_cache_miss(uint64_t ns) {
  std::lock_guard lock(mutex_);
  add(stats_.inference.cache_miss, ns);
}

void ModelStatistics::record_failure(uint64_t request_ns, FailureReason reason) {
  std::lock_guard lock(mutex_);
  add(stats_.inference.fail, request_ns);
  stats_.failures[static_cast<size_t>(reason)] += 1;
  // last_inference stays: Triton moves it with successful inferences only.
}

void ModelStatistics::record_execution(uint64_t batch_size, uint64_t input_ns, uint64_t infer_ns,
                                       uint64_t output_ns) {
  std::lock_guard lock(mutex_);
  stats_.execution_count += 1;
  BatchStatistics& b = stats_.batches[batch_size];
  b.batch_size = batch_size;
  add(b.compute_input, input_ns);
  add(b.compute_infer, infer_ns);
  add(b.compute_output, output_ns);
}

StatisticsSnapshot ModelStatistics::snapshot() const {
  StatisticsSnapshot copy;
  {
    std::lock_guard lock(mutex_);
    copy = stats_;
  }
  copy.pending = pending();
  return copy;
}

}  // namespace kiln::server
