#pragma once
// `kiln quantize --int4`: a MatMul or Gemm whose weight is a constant 2-D float32 tensor becomes
// com.microsoft MatMulNBits (onnxruntime's contrib op: the weight in 4-bit blocks along K, one
// scale and zero point a block; ops/matmul_nbits_layout.hpp), which Kiln and onnxruntime both
// run. Gemm: transB is undone on the weight, alpha is folded into it before quantization, C
// (times beta) becomes the op's bias when it is a vector of N (or a scalar), else an Add after;
// a Gemm whose C is computed and whose beta is not 1 is left alone (int4_refusal says so).
#include <string>
#include <vector>

#include "compiler/int4_weights.hpp"
#include "ir/graph.hpp"

namespace kiln::compiler {

// Why `n` (a MatMul / Gemm with a constant 2-D float32 weight in slot 1, transA 0) cannot be
// rewritten, or "".
std::string int4_refusal(const ir::Node& n);

// K: the rows of the node's weight in its [K, N] form.
int64_t int4_weight_rows(const ir::Node& n);

struct Int4Rewrite {
  size_t float_bytes = 0;  // the float32 weight's
  size_t int4_bytes = 0;   // codes, scales and zero points
  std::string rtn_reason;  // with a Gram matrix: why GPTQ fell back to RTN ("" when it ran)
};

// Replaces `n` by MatMulNBits (plus the Add of a Gemm's C where needed); the node's output keeps
// its name. A MatMul's bias Add after it stays, as onnxruntime's quantizer leaves it (Kiln's
// fuse_bias_activation pass folds it into the op's bias when it compiles the model). `gram` (K x K,
// add_to_gram's) selects GPTQ with `damp`; nullptr: RTN.
Int4Rewrite rewrite_int4(ir::Graph& g, ir::Node* n, const Int4Params& p,
                         const std::vector<double>* gram, double damp);

}  // namespace kiln::compiler
