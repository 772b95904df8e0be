#pragma once
// Sparsity masks on weight tensors, in place: magnitude (the smallest |w| set to zero, per tensor
// or with one threshold over several) and 2:4 (in every 4 consecutive entries along the reduction
// axis, the 2 largest |w| kept: the pattern sparse tensor cores run at twice the dense rate).
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace kiln::compiler {

// Zeroes round(ratio * numel) entries of `w` (float32), the smallest in magnitude first (ties in
// index order). Returns how many entries of `w` are zero afterwards. ratio in [0, 1].
int64_t mask_by_magnitude(Tensor& w, double ratio);

// The magnitude below which round(ratio * total) of the entries of all `weights` lie, and how
// many entries at exactly that magnitude must go too to reach the count (in tensor order).
struct GlobalThreshold {
  float magnitude = 0;
  int64_t ties_to_zero = 0;
};
GlobalThreshold global_magnitude_threshold(const std::vector<const Tensor*>& weights, double ratio);

// Zeroes the entries below `t.magnitude`, and entries equal to it while `ties_left` > 0
// (decremented). Returns how many entries of `w` are zero afterwards.
int64_t mask_below(Tensor& w, const GlobalThreshold& t, int64_t& ties_left);

// 2:4 along `axis` (its size a multiple of 4; InvalidArgument naming `what` otherwise). Returns
// the zeros afterwards.
int64_t mask_two_of_four(Tensor& w, int64_t axis, const std::string& what);

int64_t count_zeros(const Tensor& w);

}  // namespace kiln::compiler
