#pragma once
// How the attention kernels (kernels/attention.hpp) walk their operands, from the operands' dims:
// the batch walk with each batch entry's element offset into Q, K, V and the mask, the rows'
// strides, and where each entry's output goes. Plain [.., S, H] operands, or bsnh's
// [.., S, N, H] read as their [.., N, S, H] transposes in place. Host code (also built into the
// kernels' host emulation tests).
#include <cstdint>
#include <vector>

#include "backends/gpu/kernels/attention.hpp"

namespace kiln::backends::gpu {

// Fills the shape fields of `a` (sizes, row strides, batch walk, output placement) for these
// operands and returns the output's dims; `mask` may be null. Throws InvalidArgument, naming
// `what`, when the operands do not fit together.
std::vector<int64_t> plan_attention(const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                                    const std::vector<int64_t>& v, const std::vector<int64_t>* mask,
                                    bool bsnh, kernels::AttentionArgs& a, const char* what);

}  // namespace kiln::backends::gpu
