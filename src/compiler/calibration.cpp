#include "compiler/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "core/error.hpp"

namespace kiln::compiler {

static_assert(std::endian::native == std::endian::little,
              "the calibration cache is written little-endian as the host's integers");

void CalibrationHistogram::add(std::span<const float> values) {
  float bmin = INFINITY, bmax = -INFINITY;
  for (float x : values) {
    if (!std::isfinite(x)) continue;
    bmin = std::min(bmin, x);
    bmax = std::max(bmax, x);
  }
  if (!(bmin <= bmax)) return;  // nothing finite
  lo = std::min(lo, bmin);
  hi = std::max(hi, bmax);
  if (!(width > 0)) {
    // The first batch sets the bins: its own range (a constant batch: |value| or 1 wide).
    const double span = static_cast<double>(bmax) - bmin;
    const double wide = span > 0 ? span : (bmin != 0 ? std::fabs(static_cast<double>(bmin)) : 1.0);
    origin = bmin;
    // A hair wider than the span, so that the largest value falls inside the last bin.
    width = wide * (1 + 1e-9) / kCalibrationBins;
  }
  const double top = origin + kCalibrationBins * width;
  if (bmin < origin || bmax >= top) {
    // Grow: width times f (a power of two), origin down by j whole old bins; old bin i lands
    // whole in new bin (i + j) / f.
    double j = bmin < origin ? std::ceil((origin - static_cast<double>(bmin)) / width) : 0;
    double f = 2;
    for (int guard = 0; guard < 4096; ++guard, f *= 2) {
      const double new_top = origin - j * width + kCalibrationBins * f * width;
      if (new_top > bmax && std::floor((kCalibrationBins - 1 + j) / f) <= kCalibrationBins - 1) {
        break;
      }
    }
    std::array<uint64_t, kCalibrationBins> merged{};
    for (int i = 0; i < kCalibrationBins; ++i) {
      if (bins[i] == 0) continue;
      const double nb = std::floor((i + j) / f);
      merged[static_cast<size_t>(std::clamp(nb, 0.0, double(kCalibrationBins - 1)))] += bins[i];
    }
    bins = merged;
    origin -= j * width;
    width *= f;
  }
  const double inv = 1.0 / width;
  for (float x : values) {
    if (!std::isfinite(x)) continue;
    const double b = std::floor((static_cast<double>(x) - origin) * inv);
    ++bins[static_cast<size_t>(std::clamp(b, 0.0, double(kCalibrationBins - 1)))];
    ++count;
    zeros += x == 0.f;
  }
}

std::pair<float, float> minmax_range(const CalibrationHistogram& h) {
  if (h.count == 0) return {0.f, 0.f};
  return {h.lo, h.hi};
}

double collapsed_fraction(const CalibrationHistogram& h, double step) {
  const double nonzero = static_cast<double>(h.count - std::min(h.zeros, h.count));
  if (nonzero <= 0 || !(h.width > 0) || !(step > 0)) return 0;
  const double half = step / 2;
  double inside = 0;
  for (int b = 0; b < kCalibrationBins; ++b) {
    if (h.bins[b] == 0) continue;
    const double lo = h.origin + b * h.width, hi = lo + h.width;
    const double overlap = std::min(hi, half) - std::max(lo, -half);
    if (overlap <= 0) continue;
    // The exact zeros sit in the bin holding 0: only the rest of it is spread over its width.
    double n = static_cast<double>(h.bins[b]);
    if (lo <= 0 && 0 < hi) n -= static_cast<double>(std::min<uint64_t>(h.zeros, h.bins[b]));
    inside += n * std::min(overlap / h.width, 1.0);
  }
  return std::clamp(inside / nonzero, 0.0, 1.0);
}

std::pair<float, float> percentile_range(const CalibrationHistogram& h, double percentile) {
  if (h.count == 0) return {0.f, 0.f};
  const double cut = static_cast<double>(h.count) * (100.0 - percentile) / 100.0;
  double seen = 0;
  int low = 0;
  while (low < kCalibrationBins - 1 && seen + h.bins[low] <= cut) seen += h.bins[low++];
  seen = 0;
  int high = kCalibrationBins - 1;
  while (high > low && seen + h.bins[high] <= cut) seen += h.bins[high--];
  const float a = static_cast<float>(h.origin + low * h.width);
  const float b = static_cast<float>(h.origin + (high + 1) * h.width);
  return {std::clamp(a, h.lo, h.hi), std::clamp(b, h.lo, h.hi)};
}

namespace {

// Fewest bins a candidate range spans: below it each code would hold about one bin and the
// divergence could no longer see the codes' resolution (TensorRT's search starts at its 128
// levels for the same reason).
constexpr int kMinBins = 256;
constexpr int kCodes = 256;

struct EntropySearch {
  const CalibrationHistogram& h;
  std::vector<double> c;    // the counts, exact zeros left out
  std::vector<double> pre;  // pre[k]: sum of c[0, k)
  int first = 0, last = -1;
  double total = 0;

  explicit EntropySearch(const CalibrationHistogram& hist) : h(hist), c(kCalibrationBins) {
    for (int i = 0; i < kCalibrationBins; ++i) c[i] = static_cast<double>(h.bins[i]);
    if (h.zeros > 0) {
      const double pz = std::floor((0.0 - h.origin) / h.width);
      if (pz >= 0 && pz < kCalibrationBins) {
        double& z = c[static_cast<size_t>(pz)];
        z = std::max(0.0, z - static_cast<double>(h.zeros));
      }
    }
    pre.assign(kCalibrationBins + 1, 0.0);
    for (int i = 0; i < kCalibrationBins; ++i) pre[i + 1] = pre[i] + c[i];
    total = pre[kCalibrationBins];
    for (int i = 0; i < kCalibrationBins; ++i) {
      if (c[i] > 0) {
        if (last < 0) first = i;
        last = i;
      }
    }
  }

  // The value range of bins [a, b): the data's own extremes at the data's ends, 0 held.
  std::pair<double, double> range(int a, int b) const {
    double ra = a <= first ? h.lo : h.origin + a * h.width;
    double rb = b > last ? h.hi : h.origin + b * h.width;
    return {std::min(ra, 0.0), std::max(rb, 0.0)};
  }

  // KL(P || Q): P the counts of [a, b) with those below and above folded into its end bins; Q
  // the counts of [a, b) (without the folded ones) as the uint8 codes over that range see them:
  // each code's mass (values taken as spread evenly inside a bin) spread evenly over the part of
  // the range the code covers. (TensorRT spreads a group's mass over its whole bins instead; with
  // a real code grid those groups are 3 or 4 bins as it happens to fall, and the divergence then
  // jumps between neighbouring ends: dips of aliasing, not of information.)
  double divergence(int a, int b) const {
    const auto [ra, rb] = range(a, b);
    const double scale = (rb - ra) / (kCodes - 1);
    if (!(scale > 0)) return INFINITY;
    const double zp = std::round(-ra / scale);
    const double inside = pre[b] - pre[a];
    if (!(inside > 0)) return INFINITY;
    const double lo_edge = h.origin + a * h.width, hi_edge = h.origin + b * h.width;
    // The mass of [a, b) below x.
    auto mass_below = [&](double x) {
      const double t = std::clamp((x - h.origin) / h.width, double(a), double(b));
      const int i = std::min(static_cast<int>(t), b - 1);
      return pre[i] - pre[a] + c[i] * std::min(t - i, 1.0);
    };
    // Code k's interval within the range (the end codes take what lies past them).
    auto code_lo = [&](int k) {
      return k == 0 ? lo_edge : std::max(lo_edge, (k - zp - 0.5) * scale);
    };
    auto code_hi = [&](int k) {
      return k == kCodes - 1 ? hi_edge : std::min(hi_edge, (k - zp + 0.5) * scale);
    };
    auto code_of = [&](double x) {
      return static_cast<int>(
          std::clamp(std::floor(x / scale + zp + 0.5), 0.0, double(kCodes - 1)));
    };
    std::array<double, kCodes> density{};  // mass per unit of value
    for (int k = 0; k < kCodes; ++k) {
      const double lo = code_lo(k), hi = code_hi(k);
      density[k] = hi > lo ? (mass_below(hi) - mass_below(lo)) / (hi - lo) : 0.0;
    }
    constexpr double kFloor = 1e-6;  // Q's share where it has none and P has some
    double kl = 0;
    for (int i = a; i < b; ++i) {
      double p = c[i];
      if (i == a) p += pre[a];
      if (i == b - 1) p += total - pre[b];
      if (p <= 0) continue;
      const double x0 = h.origin + i * h.width, x1 = x0 + h.width;
      double q = 0;
      for (int k = code_of(x0), last = code_of(x1); k <= last; ++k) {
        const double overlap = std::min(x1, code_hi(k)) - std::max(x0, code_lo(k));
        if (overlap > 0) q += overlap * density[k];
      }
      p /= total;
      kl += p * std::log(p / std::max(q / inside, kFloor));
    }
    return kl;
  }

  // The best end in [from, to] (inclusive) of f(end): a coarse pass, then every end around the
  // best.
  template <class F>
  int best(int from, int to, F&& f) const {
    if (from >= to) return to;
    const int step = std::max(1, (to - from) / 512);
    int arg = to;
    double min = f(to);
    for (int e = from; e < to; e += step) {
      if (const double d = f(e); d < min) min = d, arg = e;
    }
    for (int e = std::max(from, arg - step); e <= std::min(to, arg + step); ++e) {
      if (const double d = f(e); d < min) min = d, arg = e;
    }
    return arg;
  }
};

}  // namespace

std::pair<float, float> entropy_range(const CalibrationHistogram& h) {
  if (h.count == 0 || !(h.width > 0)) return minmax_range(h);
  const EntropySearch s(h);
  if (s.last < 0 || s.last + 1 - s.first <= kMinBins) return minmax_range(h);
  // Bin edge at or below 0 and at or above it (clamped to the bins).
  const double pz = (0.0 - h.origin) / h.width;
  const int zero_down = static_cast<int>(std::clamp(std::floor(pz), 0.0, double(kCalibrationBins)));
  const int zero_up = static_cast<int>(std::clamp(std::ceil(pz), 0.0, double(kCalibrationBins)));
  int a = s.first, b = s.last + 1;
  if (h.hi > 0) {
    const int from = std::max(a + kMinBins, zero_up);
    b = s.best(std::min(from, b), b, [&](int e) { return s.divergence(a, e); });
  }
  if (h.lo < 0) {
    // The lower end: searched from the data's first bin up (the best is the smallest
    // divergence; `best` scans ends, here the start as -e so that larger means wider).
    const int to = std::min(b - kMinBins, zero_down);
    if (to > a) {
      const int start = -s.best(-to, -a, [&](int e) { return s.divergence(-e, b); });
      a = start;
    }
  }
  const auto [ra, rb] = s.range(a, b);
  return {static_cast<float>(std::max(ra, static_cast<double>(h.lo))),
          static_cast<float>(std::min(rb, static_cast<double>(h.hi)))};
}

// ---- the cache ----------------------------------------------------------------------------

uint64_t fnv1a(std::string_view bytes, uint64_t h) {
  for (unsigned char ch : bytes) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'L', '\0'};
constexpr uint32_t kMaxValues = 1u << 24;
constexpr uint32_t kMaxName = 1u << 16;

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

struct Reader {
  std::string_view bytes;
  std::string_view origin;
  size_t at = 0;

  [[noreturn]] void bad(const std::string& what) const {
    fail(ErrorCode::InvalidArgument,
         "the calibration cache '{}' is malformed: {} (at byte {} of {}); delete it or give "
         "another --calibration-cache",
         origin, what, at, bytes.size());
  }
  template <class T>
  T get(const char* what) {
    if (bytes.size() - at < sizeof(T)) bad(fmt::format("it ends inside {}", what));
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
};

}  // namespace

std::string serialize_calibration_cache(const CalibrationCache& cache) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kCalibrationCacheVersion);
  put<uint32_t>(out, kCalibrationBins);
  put<uint64_t>(out, cache.model_hash);
  put<uint64_t>(out, cache.data_hash);
  put<uint32_t>(out, static_cast<uint32_t>(cache.values.size()));
  for (const auto& [name, h] : cache.values) {
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<float>(out, h.lo);
    put<float>(out, h.hi);
    put<double>(out, h.origin);
    put<double>(out, h.width);
    put<uint64_t>(out, h.count);
    put<uint64_t>(out, h.zeros);
    // Only the bins from the first to the last that hold values.
    uint32_t first = 0, end = 0;
    for (uint32_t i = 0; i < kCalibrationBins; ++i) {
      if (h.bins[i] == 0) continue;
      if (end == 0) first = i;
      end = i + 1;
    }
    put<uint32_t>(out, first);
    put<uint32_t>(out, end - first);
    for (uint32_t i = first; i < end; ++i) put<uint64_t>(out, h.bins[i]);
  }
  return out;
}

CalibrationCache parse_calibration_cache(std::string_view bytes, std::string_view origin) {
  Reader r{bytes, origin};
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    r.bad("it does not start with the calibration cache's magic bytes \"KILNCAL\"");
  }
  r.at = sizeof(kMagic);
  const uint32_t version = r.get<uint32_t>("the version");
  if (version != kCalibrationCacheVersion) {
    r.bad(fmt::format("version {}, this Kiln reads version {}", version, kCalibrationCacheVersion));
  }
  const uint32_t bins = r.get<uint32_t>("the bin count");
  if (bins != kCalibrationBins) {
    r.bad(fmt::format("{} bins a value, this Kiln uses {}", bins, kCalibrationBins));
  }
  CalibrationCache cache;
  cache.model_hash = r.get<uint64_t>("the model's hash");
  cache.data_hash = r.get<uint64_t>("the data's hash");
  const uint32_t n = r.get<uint32_t>("the value count");
  if (n > kMaxValues) r.bad(fmt::format("{} values, more than {}", n, kMaxValues));
  for (uint32_t v = 0; v < n; ++v) {
    const uint32_t len = r.get<uint32_t>("a value's name length");
    if (len == 0 || len > kMaxName) {
      r.bad(fmt::format("value #{}'s name is {} bytes long (1 to {})", v, len, kMaxName));
    }
    if (bytes.size() - r.at < len) r.bad(fmt::format("it ends inside value #{}'s name", v));
    std::string name(bytes.substr(r.at, len));
    r.at += len;
    CalibrationHistogram h;
    h.lo = r.get<float>("a value's minimum");
    h.hi = r.get<float>("a value's maximum");
    h.origin = r.get<double>("a value's bin origin");
    h.width = r.get<double>("a value's bin width");
    h.count = r.get<uint64_t>("a value's count");
    h.zeros = r.get<uint64_t>("a value's count of zeros");
    const uint32_t first = r.get<uint32_t>("a value's first bin");
    const uint32_t held = r.get<uint32_t>("a value's bin count");
    if (first > kCalibrationBins || held > kCalibrationBins - first) {
      r.bad(fmt::format("value '{}' stores bins {} to {} of {}", name, first,
                        uint64_t{first} + held, kCalibrationBins));
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < held; ++i) {
      const uint64_t b = r.get<uint64_t>("a value's bins");
      if (b > std::numeric_limits<uint64_t>::max() - sum) {
        r.bad(fmt::format("value '{}''s bins overflow", name));
      }
      sum += b;
      h.bins[first + i] = b;
    }
    if (sum != h.count || h.zeros > h.count) {
      r.bad(fmt::format("value '{}' counts {} values ({} zeros) but its bins hold {}", name,
                        h.count, h.zeros, sum));
    }
    if (h.count > 0) {
      const double top = h.origin + kCalibrationBins * h.width;
      if (!std::isfinite(h.lo) || !std::isfinite(h.hi) || h.lo > h.hi || !std::isfinite(h.origin) ||
          !(h.width > 0) || !std::isfinite(top) || h.lo < h.origin - h.width ||
          h.hi > top + h.width || (h.zeros > 0 && !(h.lo <= 0 && h.hi >= 0))) {
        r.bad(
            fmt::format("value '{}' has an inconsistent range (min {}, max {}, bins from {} "
                        "by {})",
                        name, h.lo, h.hi, h.origin, h.width));
      }
    } else {
      h = CalibrationHistogram{};
    }
    if (cache.values.count(name)) r.bad(fmt::format("value '{}' appears twice", name));
    cache.values.emplace(std::move(name), h);
  }
  if (r.at != bytes.size())
    r.bad(fmt::format("{} bytes follow its last value", bytes.size() - r.at));
  return cache;
}

}  // namespace kiln::compiler
