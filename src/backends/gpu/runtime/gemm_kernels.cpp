// MatMul and Gemm (and Kiln's FusedMatMul / FusedGemm with any fused activation) on the GPU through
// cuBLASLt (NVIDIA; hipBLASLt would serve AMD where ROCm has it, and ROCm 5.2 has none): float32
// (computed in float32, no TF32) and float16 (accumulated in float32), 2-D and batched products,
// Gemm's transA/transB/alpha, and its C as a bias row (beta 1, cuBLASLt's bias epilogue) or a
// full [M, N] matrix with any beta; a fused Relu is the epilogue, another activation an
// element-wise pass over the result (its point function, as the reference computes it). Which
// nodes it takes is decided from the declared types and shapes (gemm_node.hpp); the rest go to
// Kiln's own GEMM
// (own_gemm_kernels.cpp) or fall back to the CPU with the reason.
#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/cublaslt_api.hpp"
#include "backends/gpu/runtime/gemm_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/kernel_table.hpp"
#include "core/dtype.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kGemmKernel = "gpu.gemm";

// The node's GEMM (gemm_node.hpp) within cuBLASLt's epilogues (a Relu or none; another
// activation a pass of its own after the product: gemm_activation_params), a bias row added once
// (beta 1) or a full C.
std::string check(const ir::Node& node, GemmNode& out) {
  if (std::string why = read_gemm_node(node, out); !why.empty()) return why;
  if (out.c == GemmNode::C::Row && out.beta != 1.f) {
    return "Gemm with a bias row C needs beta 1 with cuBLASLt";
  }
  if (out.c == GemmNode::C::Column || out.c == GemmNode::C::Scalar) {
    return "Gemm's C of shape [M, 1] or [] needs gpu.own.gemm";
  }
  return "";
}

// One product's cuBLASLt objects, made for one set of runtime dims and kept for the next run.
struct Plan {
  std::vector<int64_t> key;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void reset(const CublasLtApi& lt) {
    if (desc) lt.desc_destroy(desc);
    for (auto* l : {a, b, c}) {
      if (l) lt.layout_destroy(l);
    }
    desc = nullptr;
    a = b = c = nullptr;
  }
};

class GemmKernel final : public Kernel {
 public:
  GemmKernel(GpuBackendImpl& backend, const ir::Node& node, const GemmNode& shape)
      : shape_(shape),
        post_(gemm_activation_params(shape)),
        dtype_(node.input(0)->type().dtype),
        label_(node.name()),
        workspace_(backend.allocate(kWorkspaceBytes)) {}
  ~GemmKernel() override { plan_.reset(cublaslt()); }
  std::string_view name() const override { return kGemmKernel; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const CublasLtApi& lt = cublaslt();
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    KILN_CHECK(a.layout.is_row_major() && b.layout.is_row_major() && a.dtype == dtype_ &&
                   b.dtype == dtype_,
               ErrorCode::Internal, "gpu.gemm {}: operands not row-major {}", label_,
               dtype_name(dtype_));
    // Row-major [M, K] x [K, N] (before transposes), with a batch of `batch` products.
    const GemmDims d = gemm_dims(shape_, a, b, label_);
    const int64_t m = d.m, n = d.n, k = d.k, batch = d.batch;
    const std::vector<int64_t>& out_dims = d.out_dims;
    DeviceTensor y = outputs.allocate(0, dtype_, out_dims);
    if (y.numel() == 0) return;
    const void* c = nullptr;
    if (shape_.c != GemmNode::C::None) c = in[2].data;
    prepare(lt, {m, n, k, batch, d.stride_a, d.stride_b});
    const float alpha = shape_.alpha;
    // The bias epilogue adds C once; a full C is scaled by beta; without C, beta is 0.
    const float beta = shape_.c == GemmNode::C::Full ? shape_.beta : 0.f;
    if (shape_.c == GemmNode::C::Row) {
      lt_check(lt.desc_set(plan_.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c, sizeof(c)),
               "cuBLASLt bias pointer");
    }
    // Column-major view of the row-major product: D^T = op(B)^T op(A)^T, so B comes first.
    const void* c_matrix = shape_.c == GemmNode::C::Full ? c : y.data;
    lt_check(lt.matmul(lt.handle, plan_.desc, &alpha, b.data, plan_.a, a.data, plan_.b, &beta,
                       c_matrix, plan_.c, y.data, plan_.c, &plan_.algo, workspace_.data(),
                       kWorkspaceBytes, gpu_stream(stream).handle()),
             "cublasLtMatmul");
    if (has_post()) {
      check_launch(kernels::launch_unary(post_, *float_type(dtype_), y.data, y.data, y.numel(),
                                         gpu_stream(stream).handle()),
                   "gpu.gemm activation");
    }
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{4} << 20;

  void prepare(const CublasLtApi& lt, std::vector<int64_t> key) {
    if (plan_.desc && plan_.key == key) return;
    plan_.reset(lt);
    plan_.key = key;
    const int64_t m = key[0], n = key[1], k = key[2], batch = key[3];
    const cudaDataType_t type = dtype_ == DataType::Float16 ? CUDA_R_16F : CUDA_R_32F;
    lt_check(lt.desc_create(&plan_.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cuBLASLt matmul desc");
    const cublasOperation_t op_first = shape_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = shape_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(lt.desc_set(plan_.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
             "cuBLASLt transa");
    lt_check(lt.desc_set(plan_.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
             "cuBLASLt transb");
    // cuBLASLt applies the epilogue to alpha op(A) op(B) + beta C (+ bias): Gemm's semantics.
    const bool bias = shape_.c == GemmNode::C::Row;
    if (bias || (shape_.activation == kernels::GemmActivation::Relu)) {
      const cublasLtEpilogue_t epilogue =
          bias ? ((shape_.activation == kernels::GemmActivation::Relu) ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                                       : CUBLASLT_EPILOGUE_BIAS)
               : CUBLASLT_EPILOGUE_RELU;
      lt_check(lt.desc_set(plan_.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "cuBLASLt epilogue");
    }
    // First operand: B's storage seen column-major; second: A's; D (and C): [N, M], ld N.
    const uint64_t b_rows = shape_.trans_b ? k : n, b_cols = shape_.trans_b ? n : k;
    const uint64_t a_rows = shape_.trans_a ? m : k, a_cols = shape_.trans_a ? k : m;
    lt_check(lt.layout_create(&plan_.a, type, b_rows, b_cols, b_rows), "cuBLASLt layout");
    lt_check(lt.layout_create(&plan_.b, type, a_rows, a_cols, a_rows), "cuBLASLt layout");
    lt_check(lt.layout_create(&plan_.c, type, n, m, n), "cuBLASLt layout");
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      const int64_t strides[3] = {key[5], key[4], m * n};
      cublasLtMatrixLayout_t layouts[3] = {plan_.a, plan_.b, plan_.c};
      for (int i = 0; i < 3; ++i) {
        lt_check(
            lt.layout_set(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
            "cuBLASLt batch count");
        lt_check(lt.layout_set(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                               sizeof(strides[i])),
                 "cuBLASLt batch stride");
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    lt_check(lt.pref_create(&pref), "cuBLASLt preference");
    const uint64_t ws = kWorkspaceBytes;
    lt_check(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
             "cuBLASLt workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t s = lt.heuristic(lt.handle, plan_.desc, plan_.a, plan_.b, plan_.c, plan_.c, pref,
                                    1, &result, &found);
    lt.pref_destroy(pref);
    lt_check(s, "cublasLtMatmulAlgoGetHeuristic");
    KILN_CHECK(found > 0, ErrorCode::Unsupported,
               "gpu.gemm {}: cuBLASLt has no algorithm for [{}x{}] x [{}x{}] ({}, batch {})",
               label_, m, k, k, n, dtype_name(dtype_), batch);
    plan_.algo = result.algo;
  }

  bool has_post() const {
    return shape_.activation != kernels::GemmActivation::None &&
           shape_.activation != kernels::GemmActivation::Relu;
  }

  GemmNode shape_;
  kernels::UnaryParams post_;  // the activation after the product (has_post())
  DataType dtype_;
  std::string label_;
  DeviceBuffer workspace_;
  Plan plan_;
};

std::string check_node(const ir::Node& node) {
  GemmNode shape;
  std::string why = check(node, shape);
  if (why.empty() && !cublaslt().ok()) why = cublaslt().error;
  return why;
}

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  GemmNode shape;
  check(node, shape);
  return std::make_unique<GemmKernel>(static_cast<GpuBackendImpl&>(backend), node, shape);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "MatMul",
                      .name = kGemmKernel,
                      .library = "cuBLASLt",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Gemm",
                      .name = kGemmKernel,
                      .library = "cuBLASLt",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedMatMul",
                      .name = kGemmKernel,
                      .library = "cuBLASLt",
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedGemm",
                      .name = kGemmKernel,
                      .library = "cuBLASLt",
                      .check = check_node,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu

// AMD: hipBLASLt would take cuBLASLt's place, but ROCm 5.2 (this build's) has none; Kiln's own
// GEMM (own_gemm_kernels.cpp) is the GEMM there.
#endif
