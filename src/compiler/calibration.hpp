#pragma once
// INT8 calibration of one activation: a streaming histogram of bounded size, and the three ways
// `kiln quantize` reads a range off it (minmax, percentile, entropy), plus the calibration cache
// that keeps the histograms between runs (`--calibration-cache`).
//
// Memory: one histogram is kCalibrationBins 64-bit counts (16 KiB) and a few numbers, whatever
// the model, the tensor's size or the number of calibration sets. Values are added batch by
// batch (one calibration set's tensor at a time); when a batch falls outside the bins' range,
// the range grows: the bin width is multiplied by a power of two and the origin moved down by a
// whole number of old bins, so that every old bin lands whole in one new bin (exact merging, no
// value is kept).
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::compiler {

constexpr int kCalibrationBins = 2048;

struct CalibrationHistogram {
  float lo = INFINITY, hi = -INFINITY;  // the exact extremes of the finite values seen
  double origin = 0, width = 0;         // bin b covers [origin + b width, origin + (b+1) width)
  uint64_t count = 0;                   // finite values seen (the bins' sum)
  uint64_t zeros = 0;                   // of them exactly 0 (in the bin holding 0)
  std::array<uint64_t, kCalibrationBins> bins{};

  // Adds a batch of values (non-finite ones are skipped).
  void add(std::span<const float> values);
};

// The smallest and largest values seen ({0, 0} when none).
std::pair<float, float> minmax_range(const CalibrationHistogram& h);
// The range left when (100 - percentile) % of the values is cut from each tail.
std::pair<float, float> percentile_range(const CalibrationHistogram& h, double percentile);
// The range whose uint8 quantization (asymmetric, widened to hold 0, 255 steps) loses least
// information: the one minimizing the KL divergence between the histogram (the values past the
// range folded into its end bins) and the histogram as the 256 codes see it (each code's mass
// spread over its bins), searched for the upper end first and then the lower one. Exact zeros
// are left out: 0 is always a code, so they quantize exactly whatever the range (after ReLU they
// are most of the values, and would make the search clip everything else).
std::pair<float, float> entropy_range(const CalibrationHistogram& h);

// The share of the nonzero finite values seen whose magnitude is below half of `step`: those
// that quantize to the zero point with that step, their information lost (a bin straddling the
// bound counts by the part of its width inside, its values taken as spread evenly; exact zeros
// are left out: they quantize exactly). 0 when no nonzero value was seen.
double collapsed_fraction(const CalibrationHistogram& h, double step);

// The calibration cache: the histograms of one model on one calibration data, keyed by a hash
// of each. Little-endian binary, versioned (docs/QUANTIZATION.md gives the layout).
struct CalibrationCache {
  uint64_t model_hash = 0;
  uint64_t data_hash = 0;
  std::map<std::string, CalibrationHistogram> values;
};

constexpr uint32_t kCalibrationCacheVersion = 1;

// 64-bit FNV-1a, continued from `h`.
uint64_t fnv1a(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ULL);

std::string serialize_calibration_cache(const CalibrationCache& cache);
// Throws kiln::Error (InvalidArgument) naming what is wrong with a malformed file: `origin`
// names it in the message.
CalibrationCache parse_calibration_cache(std::string_view bytes, std::string_view origin);

}  // namespace kiln::compiler
