// INT8 calibration (compiler/calibration.hpp): the streaming histogram's range growth, the
// ranges read off it, the entropy (KL) search on tensors with outliers and with ReLU's zeros, and
// the calibration cache's parser on well-formed and malformed bytes.
#include "compiler/calibration.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "expect_error.hpp"

namespace kiln::compiler {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

uint64_t bin_sum(const CalibrationHistogram& h) {
  uint64_t s = 0;
  for (uint64_t b : h.bins) s += b;
  return s;
}

TEST(Calibration, HistogramGrowsByMergingAndKeepsEveryValue) {
  CalibrationHistogram h;
  std::vector<float> all;
  // Batches whose ranges widen on both sides, one constant, one with non-finite values.
  const std::vector<std::vector<float>> batches = {gaussian(5000, 1, 0.1f),
                                                   gaussian(5000, 2, 1.f),
                                                   {3.f, 3.f, 3.f},
                                                   gaussian(5000, 3, 20.f),
                                                   {INFINITY, NAN, -2.f, 0.f, 0.f}};
  for (const auto& b : batches) {
    h.add(b);
    for (float x : b) {
      if (std::isfinite(x)) all.push_back(x);
    }
  }
  EXPECT_EQ(h.count, all.size());
  EXPECT_EQ(bin_sum(h), all.size());
  EXPECT_EQ(h.lo, *std::min_element(all.begin(), all.end()));
  EXPECT_EQ(h.hi, *std::max_element(all.begin(), all.end()));
  EXPECT_LE(h.origin, h.lo);
  EXPECT_GT(h.origin + kCalibrationBins * h.width, h.hi);
  // Every value lies in its own bin: recount from the values with the final bins.
  // (A value within rounding of a bin edge may land on either side: a handful at most.)
  std::vector<uint64_t> recount(kCalibrationBins);
  for (float x : all) {
    const auto b = static_cast<size_t>(std::floor((x - h.origin) * (1.0 / h.width)));
    ++recount[std::min<size_t>(b, kCalibrationBins - 1)];
  }
  uint64_t moved = 0;
  for (int i = 0; i < kCalibrationBins; ++i) {
    moved += recount[i] > h.bins[i] ? recount[i] - h.bins[i] : h.bins[i] - recount[i];
  }
  EXPECT_LE(moved, 8u);
  const auto [lo, hi] = minmax_range(h);
  EXPECT_EQ(lo, h.lo);
  EXPECT_EQ(hi, h.hi);
}

TEST(Calibration, PercentileMatchesTheSortedValuesWithinABin) {
  CalibrationHistogram h;
  std::vector<float> all;
  for (uint32_t s = 0; s < 4; ++s) {
    const std::vector<float> b = gaussian(50000, 10 + s, 1.f + s);
    h.add(b);
    all.insert(all.end(), b.begin(), b.end());
  }
  std::sort(all.begin(), all.end());
  const double p = 99.9;
  const auto [lo, hi] = percentile_range(h, p);
  const size_t cut = static_cast<size_t>(all.size() * (100 - p) / 100);
  EXPECT_NEAR(lo, all[cut], 2 * h.width);
  EXPECT_NEAR(hi, all[all.size() - 1 - cut], 2 * h.width);
}

TEST(Calibration, EntropyClipsOutliersTighterThanMinmax) {
  CalibrationHistogram h;
  for (uint32_t s = 0; s < 4; ++s) {
    std::vector<float> b = gaussian(100000, 20 + s);
    // A few far outliers on both sides in every batch.
    for (int i = 0; i < 5; ++i) {
      b[static_cast<size_t>(i)] = 60.f + static_cast<float>(i);
      b[static_cast<size_t>(i + 5)] = -40.f - static_cast<float>(i);
    }
    h.add(b);
  }
  const auto [mlo, mhi] = minmax_range(h);
  const auto [elo, ehi] = entropy_range(h);
  EXPECT_EQ(mhi, 64.f);
  EXPECT_EQ(mlo, -44.f);
  // Much tighter than minmax, but not into the Gaussian's bulk.
  EXPECT_LT(ehi, 0.5 * mhi);
  EXPECT_GT(elo, 0.5 * mlo);
  EXPECT_GT(ehi, 3.f);
  EXPECT_LT(elo, -3.f);
}

TEST(Calibration, EntropyIgnoresReluZerosAndKeepsARangeWithoutOutliers) {
  // ReLU of a Gaussian: half the values exactly 0. The zeros are exact in any range; the search
  // must not clip the rest to a few percent of the range for their sake.
  CalibrationHistogram relu;
  std::vector<float> b = gaussian(200000, 30);
  for (float& x : b) x = std::max(x, 0.f);
  relu.add(b);
  const auto [lo, hi] = entropy_range(relu);
  EXPECT_EQ(lo, 0.f);
  EXPECT_GT(hi, 0.5 * relu.hi);
  EXPECT_LE(hi, relu.hi);
  // A uniform distribution has no tail worth cutting: entropy keeps (nearly) all of it.
  CalibrationHistogram uniform;
  std::vector<float> u(100000);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-1.f, 3.f);
  for (float& x : u) x = d(rng);
  uniform.add(u);
  const auto [ulo, uhi] = entropy_range(uniform);
  EXPECT_LT(ulo, -0.9f);
  EXPECT_GT(uhi, 2.8f);
}

CalibrationCache sample_cache() {
  CalibrationCache c;
  c.model_hash = 0x1234;
  c.data_hash = fnv1a("data");
  c.values["x"].add(gaussian(1000, 40));
  c.values["conv/out:0"].add(std::vector<float>{0.f, 0.f, 1.f, 2.f});
  c.values["never seen"];  // no values at all
  return c;
}

TEST(CalibrationCache, RoundTrips) {
  const CalibrationCache c = sample_cache();
  const std::string bytes = serialize_calibration_cache(c);
  const CalibrationCache back = parse_calibration_cache(bytes, "mem");
  EXPECT_EQ(back.model_hash, c.model_hash);
  EXPECT_EQ(back.data_hash, c.data_hash);
  ASSERT_EQ(back.values.size(), c.values.size());
  for (const auto& [name, h] : c.values) {
    const CalibrationHistogram& g = back.values.at(name);
    EXPECT_EQ(g.count, h.count) << name;
    EXPECT_EQ(g.zeros, h.zeros) << name;
    EXPECT_EQ(g.bins, h.bins) << name;
    if (h.count > 0) {
      EXPECT_EQ(g.lo, h.lo);
      EXPECT_EQ(g.hi, h.hi);
      EXPECT_EQ(g.origin, h.origin);
      EXPECT_EQ(g.width, h.width);
    }
  }
  EXPECT_EQ(serialize_calibration_cache(back), bytes);
}

TEST(CalibrationCache, RejectsMalformedBytesNamingWhatIsWrong) {
  const std::string good = serialize_calibration_cache(sample_cache());
  // Every truncation is an error, never a crash or a partial cache.
  for (size_t n = 0; n < good.size(); ++n) {
    expect_error([&] { parse_calibration_cache(good.substr(0, n), "cut.cache"); },
                 ErrorCode::InvalidArgument, "the calibration cache 'cut.cache' is malformed");
  }
  auto patched = [&](size_t at, const void* v, size_t size) {
    std::string b = good;
    std::memcpy(b.data() + at, v, size);
    return b;
  };
  expect_error([&] { parse_calibration_cache("not a cache at all", "f"); },
               ErrorCode::InvalidArgument, "magic bytes");
  const uint32_t version = 99, bins = 7;
  expect_error([&] { parse_calibration_cache(patched(8, &version, 4), "f"); },
               ErrorCode::InvalidArgument, "version 99");
  expect_error([&] { parse_calibration_cache(patched(12, &bins, 4), "f"); },
               ErrorCode::InvalidArgument, "7 bins a value");
  const uint32_t huge = 0xffffffffu;
  expect_error([&] { parse_calibration_cache(patched(32, &huge, 4), "f"); },
               ErrorCode::InvalidArgument, "values, more than");
  expect_error([&] { parse_calibration_cache(good + "x", "f"); }, ErrorCode::InvalidArgument,
               "1 bytes follow its last value");
  // The first value ("conv/out:0", 4 values): its count made 5.
  const size_t count_at = 36 + 4 + 10 + 4 + 4 + 8 + 8;
  const uint64_t five = 5;
  expect_error([&] { parse_calibration_cache(patched(count_at, &five, 8), "f"); },
               ErrorCode::InvalidArgument, "counts 5 values");
  // Its bin width made negative.
  const double negative = -1;
  expect_error([&] { parse_calibration_cache(patched(count_at - 8, &negative, 8), "f"); },
               ErrorCode::InvalidArgument, "inconsistent range");
  // A name length past the file.
  const uint32_t long_name = 60000;
  expect_error([&] { parse_calibration_cache(patched(36, &long_name, 4), "f"); },
               ErrorCode::InvalidArgument, "ends inside value #0's name");
  // The same value twice.
  CalibrationCache twice;
  twice.values["a"];
  twice.values["b"];
  std::string b = serialize_calibration_cache(twice);
  b[b.size() - 1 - 4 - 4 - 8 - 8 - 8 - 8 - 4 - 4] = 'a';  // "b" -> "a"
  expect_error([&] { parse_calibration_cache(b, "f"); }, ErrorCode::InvalidArgument,
               "value 'a' appears twice");
}

}  // namespace
}  // namespace kiln::compiler
