#pragma once
// Launcher of Kiln's own GEMM (gemm.hip): matrix-instruction tiles for 16-bit inputs where the
// arch has them (mma_tile.hpp), FMA tiles otherwise and for float32. Plain declarations.
#include <cstdint>

#include "backends/gpu/kernels/kernel_types.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

// The activation of the epilogue (ops::Activation's names and parameters, in its order).
enum class GemmActivation {
  None,
  Relu,
  Clip,
  Sigmoid,
  Silu,
  HardSwish,
  HardSigmoid,
  LeakyRelu,
  Tanh,
  Gelu,
  GeluTanh
};

// An implicit-GEMM convolution (GemmArgs::conv_a): A is not stored but read from a channels-last
// input X [images, h, w, c] as its im2col matrix [images oh ow, r s c], the reduction ordered
// (r, s, c) as the filters [n][r][s][c] are (B, with trans_b); padding reads zeros. Only
// pad_top / pad_left matter (oh and ow carry the rest).
struct ConvGeometry {
  int64_t h = 0, w = 0, c = 0, oh = 0, ow = 0;
  int r = 1, s = 1;
  int stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0, dil_h = 1, dil_w = 1;
};

// For each of `batch` products: Y = act(alpha op(A) op(B) + bias + beta C), all row-major, computed
// in float32 and rounded once to the element type. op(A) is [m, k]: A is [m, k], or [k, m] with
// trans_a; op(B) is [k, n]: B is [k, n], or [n, k] with trans_b. Y is [m, n], batch entries
// m n apart. C (null: none, beta unused) is read at c[row c_row_stride + col c_col_stride] of
// batch entry `c_batch_stride` apart: a bias row is strides (0, 1), a full C (n, 1), a column
// (1, 0). stride_a / stride_b: elements between batch entries (0: one matrix for all). bias
// (null: none) is one value per column, added beside C (a convolution's bias with its residual
// as C).
struct GemmArgs {
  FloatType type = FloatType::F32;  // F32 or F16
  const void* a = nullptr;
  const void* b = nullptr;
  void* y = nullptr;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0;
  float alpha = 1.f, beta = 0.f;
  const void* c = nullptr;
  int64_t c_row_stride = 0, c_col_stride = 0, c_batch_stride = 0;
  GemmActivation activation = GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;  // Clip: min, max; LeakyRelu: alpha; HardSigmoid
  const void* bias = nullptr;
  // A is a convolution's input read through `conv` (one batch entry, no trans_a, trans_b, m the
  // output pixels, k = r s c); launch_gemm refuses anything else with hipErrorInvalidValue.
  bool conv_a = false;
  ConvGeometry conv;
  // Matrix instructions for 16-bit inputs (mma.sync on NVIDIA sm_80+, MFMA on CDNA); false:
  // FMA tiles (RDNA 2). float32 always takes FMA tiles.
  bool matrix_tiles = true;
  // Hopper's warpgroup tiles (wgmma, NVIDIA sm_90; the library carries them as sm_90a code):
  // float16 products whose A is not transposed and whose rows are 16-byte aligned take them.
  bool wgmma = false;
  int multiprocessors = 1;  // of the device: the block tile is chosen by the waves it makes
  // A block tile to take instead of the choice by shape (KILN_GPU_GEMM_TILE): a name of
  // gemm_tile_names() or its start ("128x64"); null, empty or unknown: by shape.
  const char* tile = nullptr;
  // Split-K: where the output tiles alone would leave most multiprocessors idle, the reduction
  // is cut into parts that run as blocks of their own, each writing float32 partial products
  // (alpha applied) into `partials`, which a second kernel sums, finishing the epilogue there.
  // partial_capacity: the floats `partials` holds (gemm_partial_floats says how many a product
  // takes); null or too small: no split.
  float* partials = nullptr;
  int64_t partial_capacity = 0;
};

// The float32 partials launch_gemm's split-K takes for `args` given room without limit (at most
// kMaxGemmPartialFloats), 0 when it would not split: what a kernel allocates for a shape.
constexpr int64_t kMaxGemmPartialFloats = int64_t{2} << 20;  // 8 MiB
int64_t gemm_partial_floats(const GemmArgs& args);

// How many parts launch_gemm cuts the reduction of `args` into (1: no split).
int gemm_splits(const GemmArgs& args);

// Which block tile launch_gemm takes for `args` ("128x128x32", ...), for traces and benchmarks.
const char* gemm_tile_name(const GemmArgs& args);

// The block tiles of `type` that this build's launch_gemm can take, space-separated.
const char* gemm_tile_names(FloatType type);

hipError_t launch_gemm(const GemmArgs& args, hipStream_t stream);

}  // namespace kiln::backends::gpu::kernels
