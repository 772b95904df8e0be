#include "backends/cpu/work_threads.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln::backends::cpu {
namespace {

// A core's rough rates for the small primitives this decides about, from `kiln profile` at one
// thread on the 2-core AVX-512 development machine: an 8x256x512 product with bias and Relu took
// 30-50 us (40-70 GFLOP/s); their operands sit in L2, which streams at tens of GB/s.
constexpr double kFlopsPerMicro = 50000.0;  // 50 GFLOP/s
constexpr double kBytesPerMicro = 30000.0;  // 30 GB/s
// Work a thread must get for waking it to pay off (measured: see the header).
constexpr double kDefaultMinMicrosPerThread = 25.0;

double min_micros_per_thread() {
  static const double value = [] {
    const char* e = std::getenv("KILN_CPU_MIN_US_PER_THREAD");
    if (!e || !*e) return kDefaultMinMicrosPerThread;
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    return end && *end == '\0' && v >= 0 && std::isfinite(v) ? v : kDefaultMinMicrosPerThread;
  }();
  return value;
}

int thread_limit() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace

int threads_for_work(double flops, double bytes) {
  const int limit = thread_limit();
  const double per_thread = min_micros_per_thread();
  if (limit <= 1 || per_thread <= 0) return std::max(limit, 1);
  const double micros =
      std::max(flops, 0.0) / kFlopsPerMicro + std::max(bytes, 0.0) / kBytesPerMicro;
  const double threads = std::floor(micros / per_thread);
  return threads >= limit ? limit : std::max(1, static_cast<int>(threads));
}

ThreadLimit::ThreadLimit(int threads) {
#ifdef _OPENMP
  saved_ = omp_get_max_threads();
  if (threads >= 1 && threads < saved_) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

ThreadLimit::~ThreadLimit() {
#ifdef _OPENMP
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
#endif
}

}  // namespace kiln::backends::cpu
