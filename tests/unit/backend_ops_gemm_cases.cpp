// The harness cases of Kiln's own GEMM (gpu.own.gemm): odd M, N and K (not multiples of a block
// tile or a staging chunk), K = 1, batched and broadcast-batch MatMul, Gemm's transposes with
// every shape of C, every fused activation, and one product large enough for the big block
// tile. Each in float32 and float16; the GPU runs them with its own kernels preferred, so they
// check the own GEMM on NVIDIA too (where cuBLASLt's gpu.gemm is the default).
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.own.gemm";

std::vector<Attr> activation(const char* name, std::vector<float> params = {}) {
  std::vector<Attr> a = {s("activation", name)};
  if (!params.empty()) a.push_back(floats("activation_params", std::move(params)));
  return a;
}

// Pushes `c` in float32 (the CPU runs `cpu32`) and float16 (the CPU's cpu.fp16).
void both(std::vector<Case>& out, Case c) {
  c.gpu = kGpu;
  c.gpu_own = true;
  push_with_f16(out, std::move(c));
}

}  // namespace

std::vector<Case> gpu_gemm_cases() {
  std::vector<Case> c;
  const char* mm = "onednn.matmul";
  const char* gemm = "onednn.gemm";
  both(c, {.name = "gpu_own_matmul_odd",
           .op = "MatMul",
           .inputs = {x({37, 45}), w({45, 29})},
           .kernel = mm});
  both(c, {.name = "gpu_own_matmul_k1",
           .op = "MatMul",
           .inputs = {x({5, 1}), w({1, 7})},
           .kernel = mm});
  // Rows of 16 bytes: the vectorized staging, with edges in M and K.
  both(c, {.name = "gpu_own_matmul_aligned_edges",
           .op = "MatMul",
           .inputs = {x({70, 40}), w({40, 72})},
           .kernel = mm});
  // Big enough for the 128 x 128 block tile on a 132-multiprocessor GPU (13 x 12 tiles), N not
  // a multiple of it.
  both(c, {.name = "gpu_own_matmul_big_tile",
           .op = "MatMul",
           .inputs = {x({1536, 64}), w({64, 1544})},
           .kernel = mm});
  both(c, {.name = "gpu_own_matmul_batched",
           .op = "MatMul",
           .inputs = {x({3, 19, 33}), x({3, 33, 21})},
           .kernel = mm});
  both(c, {.name = "gpu_own_matmul_weights_fold",
           .op = "MatMul",
           .inputs = {x({2, 3, 17, 24}), w({24, 40})},
           .kernel = mm});
  both(c, {.name = "gpu_own_matmul_broadcast_a",
           .op = "MatMul",
           .inputs = {x({1, 9, 16}), x({4, 16, 10})},
           .kernel = mm});
  both(c, {.name = "gpu_own_matmul_broadcast_b",
           .op = "MatMul",
           .inputs = {x({4, 9, 16}), x({1, 16, 10})},
           .kernel = mm});
  both(c, {.name = "gpu_own_gemm_transA_bias",
           .op = "Gemm",
           .inputs = {x({33, 20}), w({33, 41}), w({41})},
           .attrs = {i("transA", 1)},
           .kernel = gemm});
  both(c, {.name = "gpu_own_gemm_transB_full_c",
           .op = "Gemm",
           .inputs = {x({20, 33}), w({41, 33}), w({20, 41})},
           .attrs = {i("transB", 1), f("alpha", 0.5f), f("beta", 2.0f)},
           .kernel = gemm});
  both(c, {.name = "gpu_own_gemm_both_trans_column_c",
           .op = "Gemm",
           .inputs = {x({33, 20}), w({41, 33}), w({20, 1})},
           .attrs = {i("transA", 1), i("transB", 1), f("beta", 0.5f)},
           .kernel = gemm});
  both(c, {.name = "gpu_own_gemm_scalar_c",
           .op = "Gemm",
           .inputs = {x({7, 9}), w({9, 11}), w({})},
           .attrs = {f("beta", 0.25f)},
           .kernel = gemm});
  both(c, {.name = "gpu_own_gemm_no_c",
           .op = "Gemm",
           .inputs = {x({3, 40}), x({5, 40})},
           .attrs = {i("transB", 1)},
           .kernel = gemm});
  const std::vector<std::vector<Attr>> activations = {activation("None"),
                                                      activation("Relu"),
                                                      activation("Clip", {0.f, 0.5f}),
                                                      activation("LeakyRelu", {0.1f}),
                                                      activation("HardSigmoid", {0.2f, 0.5f}),
                                                      activation("Sigmoid"),
                                                      activation("Silu"),
                                                      activation("HardSwish"),
                                                      activation("Tanh"),
                                                      activation("Gelu"),
                                                      activation("GeluTanh")};
  for (const std::vector<Attr>& a : activations) {
    const std::string name = std::get<std::string>(a[0].second.storage());
    both(c, {.name = "gpu_own_fused_matmul_" + name,
             .op = "FusedMatMul",
             .inputs = {x({2, 13, 40}), w({40, 24}), w({24})},
             .attrs = a,
             .kernel = mm,
             .domain = kKiln,
             .opset = 1});
    // The reference rounds the product to float16 before the bias and the activation: at one
    // HardSwish element (slope 1.5 near 3) both the GPU and the CPU's float16 path land two
    // float16 units off it (2.9727 for 2.9688), each rounding once from float32.
    c.back().reference_roundings = 2;
  }
  std::vector<Attr> trans_b = {i("transB", 1)};
  trans_b.insert(trans_b.end(), activations[9].begin(), activations[9].end());
  both(c, {.name = "gpu_own_fused_gemm_transB_gelu",
           .op = "FusedGemm",
           .inputs = {x({17, 40}), w({24, 40}), w({24})},
           .attrs = trans_b,
           .kernel = gemm,
           .domain = kKiln,
           .opset = 1});
  return c;
}

}  // namespace kiln::backend_ops
