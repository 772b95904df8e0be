#include "compiler/prune_masks.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "core/error.hpp"

namespace kiln::compiler {

int64_t count_zeros(const Tensor& w) {
  const std::span<const float> v = w.values<float>();
  return std::count(v.begin(), v.end(), 0.f);
}

int64_t mask_by_magnitude(Tensor& w, double ratio) {
  KILN_CHECK_ARG(ratio >= 0 && ratio <= 1, "prune: the ratio {} must be in [0, 1]", ratio);
  std::span<float> v = w.values<float>();
  const auto n = static_cast<int64_t>(v.size());
  const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(n)));
  if (k <= 0) return count_zeros(w);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Stable on ties (index order), so that the mask is reproducible.
  auto smaller = [&](int64_t a, int64_t b) {
    const float ma = std::fabs(v[a]), mb = std::fabs(v[b]);
    return ma < mb || (ma == mb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), smaller);
  for (int64_t i = 0; i < k; ++i) v[order[i]] = 0.f;
  return count_zeros(w);
}

GlobalThreshold global_magnitude_threshold(const std::vector<const Tensor*>& weights,
                                           double ratio) {
  KILN_CHECK_ARG(ratio >= 0 && ratio <= 1, "prune: the ratio {} must be in [0, 1]", ratio);
  std::vector<float> mags;
  for (const Tensor* w : weights) {
    for (float x : w->values<float>()) mags.push_back(std::fabs(x));
  }
  const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(mags.size())));
  if (k <= 0) return {-1.f, 0};  // nothing below a negative magnitude
  std::vector<float> sorted = mags;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end());
  const float t = sorted[k - 1];
  const auto below = std::count_if(mags.begin(), mags.end(), [&](float m) { return m < t; });
  return {t, k - below};
}

int64_t mask_below(Tensor& w, const GlobalThreshold& t, int64_t& ties_left) {
  for (float& x : w.values<float>()) {
    const float m = std::fabs(x);
    if (m < t.magnitude) {
      x = 0.f;
    } else if (m == t.magnitude && ties_left > 0) {
      x = 0.f;
      --ties_left;
    }
  }
  return count_zeros(w);
}

int64_t mask_two_of_four(Tensor& w, int64_t axis, const std::string& what) {
  const std::vector<int64_t>& dims = w.dims();
  KILN_CHECK_ARG(axis >= 0 && axis < static_cast<int64_t>(dims.size()),
                 "prune: 2:4 axis {} out of range for {} {}", axis, what, w.describe());
  const int64_t size = dims[axis];
  KILN_CHECK_ARG(size % 4 == 0,
                 "prune: 2:4 needs the reduction axis of {} to be a multiple of 4; it is {} ({})",
                 what, size, w.describe());
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t outer = w.numel() / (size * inner);
  float* v = w.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t g = 0; g < size; g += 4) {
        float* base = v + (o * size + g) * inner + i;
        std::array<int, 4> idx{0, 1, 2, 3};
        // The two largest magnitudes stay; ties keep the earlier entry.
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
          return std::fabs(base[a * inner]) > std::fabs(base[b * inner]);
        });
        base[idx[2] * inner] = 0.f;
        base[idx[3] * inner] = 0.f;
      }
    }
  }
  return count_zeros(w);
}

}  // namespace kiln::compiler
