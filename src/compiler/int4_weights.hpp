#pragma once
// INT4 block quantization of one weight matrix into MatMulNBits' layout
// (ops/matmul_nbits_layout.hpp): blocks of `block_size` values along K of each output column,
// one scale (and, asymmetric, one 4-bit zero point) a block.
//
// Round to nearest (RTN): asymmetric takes the block's range widened to hold 0, scale
// (max - min) / 15 and zero point round(-min / scale), so that every value of the block lies on
// the grid's span; symmetric puts the value of largest magnitude on code 0 (scale = that value /
// -8, zero point 8), as onnxruntime's quantizer does, so the extreme is exact and the other
// side keeps 7 steps.
//
// GPTQ (Frantar et al., 2022): the columns of K are quantized in order and each one's rounding
// error is spread over the columns not yet quantized, weighted by the inverse of the layer's
// input Gram matrix H = X^T X (the calibration activations), which minimizes the error of the
// layer's output on those inputs rather than of the weight itself. Block scales are taken from
// the updated weights when a block starts. The Gram matrix comes from the float model's
// activations (every layer's at once, not layer after layer through the quantized ones), and
// columns go in their order (no act-order, which MatMulNBits would need g_idx for). Memory while
// one weight is quantized: 5 K x K doubles (H's copy, its Cholesky factor, the inverse factor,
// H^-1, its factor) besides the Gram matrix, plus the weight as doubles.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

struct Int4Params {
  int64_t block_size = 32;
  bool symmetric = false;
};

struct Int4Weight {
  int64_t k = 0, n = 0, blocks = 0, blob = 0;
  std::vector<uint8_t> codes;        // [N][blocks][blob], the lower nibble first
  std::vector<float> scales;         // [N * blocks]
  std::vector<uint8_t> zero_points;  // packed [N][ceil(blocks / 2)]; empty when symmetric (8)
  size_t bytes() const { return codes.size() + scales.size() * sizeof(float) + zero_points.size(); }
};

// `w` is row-major [K, N] (MatMul's B).
Int4Weight quantize_int4_rtn(const float* w, int64_t k, int64_t n, const Int4Params& p);

// Adds x^T x of `rows` rows of `k` values (row-major) to the lower triangle of `gram` (K x K).
void add_to_gram(std::vector<double>& gram, const float* x, int64_t rows, int64_t k);

// GPTQ over the lower triangle of `gram` (K x K, add_to_gram's), damped by `damp` times its
// mean diagonal. Returns "" and fills `out`, or why it could not (H not positive definite even
// after damping 100x more), and the caller keeps RTN.
std::string quantize_int4_gptq(const float* w, int64_t k, int64_t n, const Int4Params& p,
                               const std::vector<double>& gram, double damp, Int4Weight& out);

}  // namespace kiln::compiler
