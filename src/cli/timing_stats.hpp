#pragma once
// Summaries of repeated timings for `kiln bench` and `kiln profile`: percentiles by nearest rank,
// the spread, and whether the spread says the machine was too noisy for the numbers to be
// trusted.
#include <string>
#include <vector>

namespace kiln::cli {

// Nearest-rank percentile (q in [0, 1]) of samples sorted ascending; 0 for none.
double percentile(const std::vector<double>& sorted, double q);

// The median of unsorted samples; 0 for none.
double median(std::vector<double> samples);

struct TimingStats {
  size_t count = 0;
  double total = 0, min = 0, mean = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
  double stddev = 0;                                          // population standard deviation
  double cv() const { return mean > 0 ? stddev / mean : 0; }  // coefficient of variation
};

TimingStats summarize_timings(std::vector<double> samples);

// Limits beyond which `kiln bench` warns that the machine is noisy.
inline constexpr double kNoisyTailRatio = 1.5;  // p99 / median
inline constexpr double kNoisyCv = 0.15;        // stddev / mean

// One sentence per limit the timings pass (empty: nothing to warn about).
std::vector<std::string> noise_warnings(const TimingStats& s);

}  // namespace kiln::cli
