#pragma once
// One axis of a Slice after ONNX's clamping rules: where it starts, its step and how many
// elements it keeps. Shared by the reference kernel (ops/slicing.cpp) and the CPU backend's
// strided copy (backends/cpu/slice_kernels.cpp), so both cut the same way.
#include <algorithm>
#include <cstdint>

namespace kiln::ops {

struct SliceAxis {
  int64_t start;
  int64_t step;
  int64_t length;
};

// Clamps start/end per the ONNX rules for an axis of `dim` elements.
inline SliceAxis resolve_slice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return {0, step, 0};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  int64_t length = 0;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    if (end > start) length = (end - start - 1) / step + 1;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    // -step overflows for INT64_MIN; go through unsigned.
    const uint64_t mag = uint64_t{0} - static_cast<uint64_t>(step);
    if (start > end)
      length = static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / mag) + 1;
  }
  return {start, step, length};
}

}  // namespace kiln::ops
