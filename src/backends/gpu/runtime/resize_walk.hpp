#pragma once
// The walk of gpu.resize (kernels/resize.hpp) for one run: the output's dims in its storage
// order, the input's strides along them (row-major or channels-last on either side), and each
// dim's taps. Apart from the kernel so the host emulation checks it (tests/gpu_emu).
#include <cstdint>
#include <vector>

#include "backends/gpu/kernels/resize.hpp"

namespace kiln::backends::gpu {

// `taps` holds one entry per logical dim (taps 0: not resized). A channels-last side is a 4-D
// [N, C, H, W] stored as [N, H, W, C].
kernels::ResizeWalk make_resize_walk(const std::vector<int64_t>& in_dims,
                                     const std::vector<int64_t>& out_dims,
                                     const std::vector<kernels::ResizeDim>& taps,
                                     bool in_channels_last, bool out_channels_last);

}  // namespace kiln::backends::gpu
