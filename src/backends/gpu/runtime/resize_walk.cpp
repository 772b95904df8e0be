#include "backends/gpu/runtime/resize_walk.hpp"

#include <numeric>

#include "backends/gpu/runtime/strided_shape.hpp"
#include "core/error.hpp"

namespace kiln::backends::gpu {

kernels::ResizeWalk make_resize_walk(const std::vector<int64_t>& in_dims,
                                     const std::vector<int64_t>& out_dims,
                                     const std::vector<kernels::ResizeDim>& taps,
                                     bool in_channels_last, bool out_channels_last) {
  const size_t rank = in_dims.size();
  KILN_CHECK(out_dims.size() == rank && taps.size() == rank &&
                 rank <= static_cast<size_t>(kernels::kMaxDims) &&
                 (rank == 4 || !(in_channels_last || out_channels_last)),
             ErrorCode::Internal, "gpu.resize: a walk of rank {} over {} dims", rank,
             out_dims.size());
  std::vector<int64_t> in_strides = row_major_strides(in_dims);
  if (in_channels_last) {
    const int64_t c = in_dims[1], h = in_dims[2], w = in_dims[3];
    in_strides = {h * w * c, 1, w * c, c};
  }
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), size_t{0});
  if (out_channels_last) order = {0, 2, 3, 1};
  kernels::ResizeWalk walk;
  walk.rank = static_cast<int>(rank);
  for (size_t k = 0; k < rank; ++k) {
    walk.out_dims[k] = out_dims[order[k]];
    walk.in_strides[k] = in_strides[order[k]];
    walk.dims[k] = taps[order[k]];
  }
  return walk;
}

}  // namespace kiln::backends::gpu
