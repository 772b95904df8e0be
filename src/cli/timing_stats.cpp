#include "cli/timing_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace kiln::cli {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

TimingStats summarize_timings(std::vector<double> samples) {
  TimingStats s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.total = std::accumulate(samples.begin(), samples.end(), 0.0);
  s.mean = s.total / static_cast<double>(s.count);
  s.min = samples.front();
  s.max = samples.back();
  s.median = median(samples);
  s.p90 = percentile(samples, 0.90);
  s.p95 = percentile(samples, 0.95);
  s.p99 = percentile(samples, 0.99);
  double squares = 0;
  for (double x : samples) squares += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(squares / static_cast<double>(s.count));
  // The nearest-rank p99 of few samples is the max; the median of an even count may lie above
  // a rank percentile by rounding. Keep min <= median <= p90 <= p95 <= p99 <= max.
  s.p90 = std::max(s.p90, s.median);
  s.p95 = std::max(s.p95, s.p90);
  s.p99 = std::max(s.p99, s.p95);
  return s;
}

std::vector<std::string> noise_warnings(const TimingStats& s) {
  std::vector<std::string> out;
  if (s.median > 0 && s.p99 / s.median > kNoisyTailRatio)
    out.push_back(fmt::format("p99 is {:.2f}x the median (limit {:.1f}x)", s.p99 / s.median,
                              kNoisyTailRatio));
  if (s.cv() > kNoisyCv)
    out.push_back(fmt::format("the coefficient of variation is {:.0f}% (limit {:.0f}%)",
                              100 * s.cv(), 100 * kNoisyCv));
  return out;
}

}  // namespace kiln::cli
