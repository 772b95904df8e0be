#pragma once
// What a MatMul, Gemm or ai.kiln FusedMatMul / FusedGemm node asks of a GPU GEMM, read once from
// its attributes and declared types (GemmNode), and a run's product dims from its operands
// (GemmDims). Shared by the GEMM kernels: cuBLASLt's (gemm_kernels.cpp) and Kiln's own
// (own_gemm_kernels.cpp), each of which adds its own limits.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/kernels/gemm.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {

struct GemmNode {
  bool gemm = false;  // Gemm / FusedGemm (else MatMul / FusedMatMul)
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  // Gemm's C, or FusedMatMul's bias (a Row with beta 1): which of Y's [M, N] it broadcasts
  // over. Full: [M, N]; Row: [N] or [1, N]; Column: [M, 1]; Scalar: [], [1] or [1, 1].
  enum class C { None, Row, Column, Scalar, Full } c = C::None;
  kernels::GemmActivation activation = kernels::GemmActivation::None;
  float act_alpha = 0.f, act_beta = 0.f;
  DataType dtype = DataType::Undefined;
};

// A fused node's `activation` / `activation_params` (ops::FusedActivation's names and parameter
// counts; the GPU library carries the IR but not the ops' readers): empty, or why they are wrong.
// Shared by every fused GPU kernel (GEMMs, the depthwise convolution).
std::string read_fused_activation(const ir::Node& node, kernels::GemmActivation& act, float& alpha,
                                  float& beta);
// An ai.kiln FusedConv's residual Z (input 3): empty when it is absent or a tensor of `dtype`
// (`present` says which), else why not. Shared by the cuDNN and the depthwise convolutions.
std::string read_fused_residual(const ir::Node& node, DataType dtype, bool& present);

// Empty when `node` is a GEMM of float32 or float16 operands whose shapes a GPU GEMM can take
// (2-D Gemm; MatMul of rank >= 2 operands whose batch dims are equal, or all 1 on one side, or
// with a 2-D B), else why not; fills `out`.
std::string read_gemm_node(const ir::Node& node, GemmNode& out);

// The node's fused activation as the element-wise kernel's parameters, for a GEMM whose library
// epilogue lacks it and runs it as a pass of its own over the result.
kernels::UnaryParams gemm_activation_params(const GemmNode& g);

// One run's product: `batch` row-major [m, k] x [k, n] products (before transposes), A's and B's
// entries stride_a / stride_b elements apart (0: one for all), into Y of out_dims.
struct GemmDims {
  int64_t m = 0, n = 0, k = 0, batch = 1, stride_a = 0, stride_b = 0;
  std::vector<int64_t> out_dims;
};

// Throws InvalidArgument (naming `label`) when the operands' dims do not multiply.
GemmDims gemm_dims(const GemmNode& g, const DeviceTensor& a, const DeviceTensor& b,
                   std::string_view label);

class GpuBackendImpl;

// Kiln's own GEMM (gpu.own.gemm, own_gemm_kernels.cpp) for `node`, which read_gemm_node takes:
// the library GEMM (gpu.gemm) times it against cuBLASLt as a tactic.
std::unique_ptr<Kernel> make_own_gemm_kernel(GpuBackendImpl& backend, const ir::Node& node);

}  // namespace kiln::backends::gpu
