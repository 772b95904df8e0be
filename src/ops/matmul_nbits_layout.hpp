#pragma once
// MatMulNBits' weight layout (onnxruntime's com.microsoft contrib op), in one place for the
// reference kernel, the CPU kernel and `kiln quantize --int4`, so the three cannot disagree:
//   B            uint8 [N][n_blocks][blob]: column n of the [K, N] weight, block after block of
//                block_size values along K, two 4-bit codes a byte, the lower nibble first; the
//                last block is padded (n_blocks = ceil(K / block_size), blob = block_size / 2).
//   scales       [N * n_blocks] (any shape of that many elements), A's type: block j of column
//                n at n * n_blocks + j.
//   zero_points  optional: packed uint8 [N][ceil(n_blocks / 2)] (block j of column n in byte
//                j / 2 of that column, the lower nibble first), or unpacked in A's type
//                [N * n_blocks]; absent: 8 (2^(bits - 1)) for every block.
//   w(k, n) = (code - zero_point) * scale;  Y = A w (+ bias [N]).
// Only bits = 4 is implemented; other widths, g_idx (act-order) and prepacked weights are
// refused naming them.
#include <cstdint>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

inline constexpr const char* kMicrosoftDomain = "com.microsoft";

struct NBitsLayout {
  int64_t k = 0, n = 0, bits = 4, block_size = 0;
  int64_t blocks = 0;  // per column: ceil(k / block_size)
  int64_t blob = 0;    // bytes of one block: block_size * bits / 8
  // Bytes of one column's packed zero points.
  int64_t packed_zero_point_bytes() const { return (blocks * bits + 7) / 8; }
};

// The node's K, N, bits, block_size (and accuracy_level, which only asks for a compute type:
// 0-4), checked: K and N in [1, 2^31), bits 4 (others Unsupported), block_size a power of two in
// [16, 2^16]. Errors name the node and the attribute.
NBitsLayout nbits_layout(const AttrReader& node);

// Checks B, scales and zero_points (nullptr when absent) against `l`, before anything is
// allocated from them: B uint8 of dims [N, n_blocks, blob], scales of `a_type` (float or float16)
// and N * n_blocks elements, zero points packed uint8 of N * packed_zero_point_bytes() elements
// or `a_type` of N * n_blocks. Errors name the node, the input and both sizes.
void check_nbits_operands(const AttrReader& node, const NBitsLayout& l, const Tensor& b,
                          const Tensor& scales, const Tensor* zero_points, DataType a_type);

// The 4-bit code of element r of a block whose bytes start at `blob`.
inline int nbits_code(const uint8_t* blob, int64_t r) {
  return (blob[r >> 1] >> ((r & 1) * 4)) & 15;
}

// Per-block scale and zero point as float, at n * n_blocks + j (operands already checked).
struct NBitsBlockParams {
  std::vector<float> scale, zero_point;
};
NBitsBlockParams nbits_block_params(const NBitsLayout& l, const Tensor& scales,
                                    const Tensor* zero_points);

}  // namespace kiln::ops
