#include "backends/cpu/strided_copy.hpp"

#include "backends/cpu/element_bits.hpp"

#include <algorithm>
#include <cstring>

namespace kiln::backends::cpu {
namespace {

template <typename T>
void gather_row(const T* src, int64_t n, int64_t stride, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
}

void strided_row(const char* src, int64_t n, int64_t stride, size_t esize, char* dst) {
  with_element_bits(esize, [&](auto tag) {
    using T = decltype(tag);
    gather_row(reinterpret_cast<const T*>(src), n, stride, reinterpret_cast<T*>(dst));
  });
}

}  // namespace

void strided_copy(const void* src_base, const std::vector<StridedAxis>& walk, size_t esize,
                  void* dst_base) {
  std::vector<StridedAxis> axes;
  int64_t total = 1;
  for (const StridedAxis& a : walk) {
    total *= a.size;
    if (a.size == 1) continue;
    if (!axes.empty() && axes.back().in_stride == a.size * a.in_stride) {
      axes.back() = {axes.back().size * a.size, a.in_stride};  // consecutive in the source too
    } else {
      axes.push_back(a);
    }
  }
  if (total == 0) return;
  const auto* px = static_cast<const char*>(src_base);
  auto* py = static_cast<char*>(dst_base);
  if (axes.empty()) axes.push_back({1, 1});
  const StridedAxis last = axes.back();
  axes.pop_back();
  const int64_t rows = total / last.size;
  const bool contiguous = last.in_stride == 1;
  // Tasks of whole rows, about 16k elements each; a task finds its first row's offset by
  // division, then steps like an odometer.
  const int64_t chunk = std::max<int64_t>(1, 16384 / last.size);
  const int64_t tasks = (rows + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (tasks > 1 && total > 32768)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t r0 = task * chunk, r1 = std::min(rows, r0 + chunk);
    std::vector<int64_t> index(axes.size());
    int64_t offset = 0;
    for (size_t k = axes.size(), rest = static_cast<size_t>(r0); k-- > 0;) {
      index[k] = static_cast<int64_t>(rest) % axes[k].size;
      rest /= static_cast<size_t>(axes[k].size);
      offset += index[k] * axes[k].in_stride;
    }
    for (int64_t r = r0; r < r1; ++r) {
      char* dst = py + static_cast<size_t>(r * last.size) * esize;
      const char* src = px + offset * static_cast<int64_t>(esize);
      if (contiguous) {
        std::memcpy(dst, src, static_cast<size_t>(last.size) * esize);
      } else {
        strided_row(src, last.size, last.in_stride, esize, dst);
      }
      for (size_t k = axes.size(); k-- > 0;) {
        offset += axes[k].in_stride;
        if (++index[k] < axes[k].size) break;
        offset -= axes[k].size * axes[k].in_stride;
        index[k] = 0;
      }
    }
  }
}

}  // namespace kiln::backends::cpu
