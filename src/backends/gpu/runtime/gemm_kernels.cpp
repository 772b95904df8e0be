// MatMul and Gemm (and Kiln's FusedMatMul / FusedGemm with any fused activation) on the GPU through
// cuBLASLt (NVIDIA; hipBLASLt would serve AMD where ROCm has it, and ROCm 5.2 has none): float32
// (computed in float32, no TF32) and float16 (accumulated in float32), 2-D and batched products,
// Gemm's transA/transB/alpha, and its C as a bias row (beta 1, cuBLASLt's bias epilogue) or a
// full [M, N] matrix with any beta; a fused Relu is the epilogue, another activation an
// element-wise pass over the result (its point function, as the reference). Which nodes it takes is
// decided from the declared types and shapes; the rest fall back to the CPU with the reason.
#include <fmt/format.h>

#include "ir/graph.hpp"

#if defined(KILN_GPU_CUDA) && !defined(__HIP__)

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/gpu/kernels/elementwise.hpp"
#include "backends/gpu/runtime/cublaslt_api.hpp"
#include "backends/gpu/runtime/fused_activation_params.hpp"
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

// What a node asks for, read from its attributes and declared shapes.
struct GemmShape {
  bool gemm = false;  // Gemm / FusedGemm (else MatMul / FusedMatMul)
  bool relu = false;  // a fused Relu (cuBLASLt's epilogue)
  // Any other fused activation: an element-wise pass over the result, in place.
  bool post = false;
  kernels::UnaryParams post_params;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  enum class C { None, Bias, Full } c = C::None;
};

bool all_ones(const std::vector<Dim>& dims, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (!(dims[i] == Dim(1))) return false;
  }
  return true;
}

// Empty when the node can run here, else why not; fills `out`.
std::string check(const ir::Node& node, GemmShape& out) {
  const bool fused = node.domain() == "ai.kiln";
  if (!(node.domain().empty() || fused) || (node.op_type() != (fused ? "FusedMatMul" : "MatMul") &&
                                            node.op_type() != (fused ? "FusedGemm" : "Gemm"))) {
    return fmt::format("no GPU kernel for {}", node.op_type());
  }
  out.gemm = node.op_type() == "Gemm" || node.op_type() == "FusedGemm";
  if (fused) {
    auto it = node.attributes().find("activation");
    const std::string act =
        it == node.attributes().end() ? "None" : it->second.get<std::string>("activation");
    if (act == "Relu") {
      out.relu = true;
    } else if (act != "None") {
      if (std::string why = fused_activation_params(node, out.post_params); !why.empty()) {
        return fmt::format("{}: {}", node.op_type(), why);
      }
      out.post = true;
    }
  }
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  if (!a || !b || !node.output(0)) return "missing operands";
  const TypeInfo& ta = a->type();
  const TypeInfo& tb = b->type();
  if (!ta.is_tensor() || !tb.is_tensor() || ta.dtype != tb.dtype ||
      (ta.dtype != DataType::Float32 && ta.dtype != DataType::Float16)) {
    return fmt::format("{} on the GPU takes float32 or float16 operands, not {} and {}",
                       node.op_type(), ta.to_string(), tb.to_string());
  }
  if (!ta.shape || !tb.shape) return "operand ranks not known";
  const std::vector<Dim>& da = ta.shape->dims();
  const std::vector<Dim>& db = tb.shape->dims();
  if (out.gemm) {
    out.trans_a = int_attr(node, "transA", 0) != 0;
    out.trans_b = int_attr(node, "transB", 0) != 0;
    out.alpha = float_attr(node, "alpha", 1.f);
    out.beta = float_attr(node, "beta", 1.f);
    if (da.size() != 2 || db.size() != 2) return "Gemm operands must be 2-D";
    const ir::Value* c = node.inputs().size() > 2 ? node.input(2) : nullptr;
    if (c && out.beta != 0.f) {
      if (!c->type().is_tensor() || c->type().dtype != ta.dtype || !c->type().shape) {
        return "Gemm's C must be a tensor of the operands' type";
      }
      const std::vector<Dim>& dc = c->type().shape->dims();
      const Dim n = out.trans_b ? db[0] : db[1];
      const Dim m = out.trans_a ? da[1] : da[0];
      if ((dc.size() == 1 && dc[0] == n) || (dc.size() == 2 && dc[0] == Dim(1) && dc[1] == n)) {
        if (out.beta != 1.f) return "Gemm with a bias row C needs beta 1 on the GPU";
        out.c = GemmShape::C::Bias;
      } else if (dc.size() == 2 && dc[0] == m && dc[1] == n) {
        out.c = GemmShape::C::Full;
      } else {
        return fmt::format(
            "Gemm's C of shape {} (neither [N], [1, N] nor [M, N]) is not "
            "supported on the GPU yet",
            c->type().shape->to_string());
      }
    }
    return "";
  }
  if (da.size() < 2 || db.size() < 2)
    return "MatMul with a vector operand is not supported on "
           "the GPU yet";
  // FusedMatMul's bias: one value per output column, cuBLASLt's bias epilogue.
  const ir::Value* bias = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (bias) {
    const TypeInfo& t = bias->type();
    if (!t.is_tensor() || t.dtype != ta.dtype || !t.shape || t.shape->rank() != 1 ||
        !(t.shape->dims()[0] == db.back())) {
      return "FusedMatMul's bias must be [N] of the operands' type";
    }
    out.c = GemmShape::C::Bias;
  }
  if (db.size() == 2) return "";  // A's leading dims fold into M
  if (da.size() != db.size()) return "MatMul of operands of different ranks (both above 2)";
  const size_t batch = da.size() - 2;
  bool equal = true;
  for (size_t i = 0; i < batch; ++i) equal &= da[i] == db[i];
  if (equal || all_ones(da, batch) || all_ones(db, batch)) return "";
  return "MatMul whose batch dims broadcast partly is not supported on the GPU yet";
}

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
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
  GemmKernel(GpuBackendImpl& backend, const ir::Node& node, const GemmShape& shape)
      : shape_(shape),
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
    int64_t m, k, n, batch = 1, stride_a = 0, stride_b = 0;
    std::vector<int64_t> out_dims;
    if (shape_.gemm) {
      m = shape_.trans_a ? a.dims[1] : a.dims[0];
      k = shape_.trans_a ? a.dims[0] : a.dims[1];
      n = shape_.trans_b ? b.dims[0] : b.dims[1];
      KILN_CHECK_ARG((shape_.trans_b ? b.dims[1] : b.dims[0]) == k,
                     "Gemm {}: inner dims {} and {} differ", label_, dims_to_string(a.dims),
                     dims_to_string(b.dims));
      out_dims = {m, n};
    } else {
      const size_t ra = a.dims.size(), rb = b.dims.size();
      k = a.dims[ra - 1];
      n = b.dims[rb - 1];
      KILN_CHECK_ARG(b.dims[rb - 2] == k, "MatMul {}: inner dims of {} and {} differ", label_,
                     dims_to_string(a.dims), dims_to_string(b.dims));
      out_dims.assign(a.dims.begin(), a.dims.end() - 1);
      if (rb == 2) {
        m = product(a.dims, 0, ra - 1);  // A's leading dims fold into M
      } else {
        m = a.dims[ra - 2];
        const int64_t ba = product(a.dims, 0, ra - 2), bb = product(b.dims, 0, rb - 2);
        KILN_CHECK_ARG(ba == bb || ba == 1 || bb == 1,
                       "MatMul {}: batch dims of {} and {} do not broadcast", label_,
                       dims_to_string(a.dims), dims_to_string(b.dims));
        batch = std::max(ba, bb);
        stride_a = ba == 1 ? 0 : m * k;
        stride_b = bb == 1 ? 0 : k * n;
        if (ba == 1) out_dims.assign(b.dims.begin(), b.dims.end() - 2), out_dims.push_back(m);
      }
      out_dims.push_back(n);
    }
    DeviceTensor y = outputs.allocate(0, dtype_, out_dims);
    if (y.numel() == 0) return;
    const void* c = nullptr;
    if (shape_.c != GemmShape::C::None) c = in[2].data;
    prepare(lt, {m, n, k, batch, stride_a, stride_b});
    const float alpha = shape_.alpha;
    // The bias epilogue adds C once; a full C is scaled by beta; without C, beta is 0.
    const float beta = shape_.c == GemmShape::C::Full ? shape_.beta : 0.f;
    if (shape_.c == GemmShape::C::Bias) {
      lt_check(lt.desc_set(plan_.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c, sizeof(c)),
               "cuBLASLt bias pointer");
    }
    // Column-major view of the row-major product: D^T = op(B)^T op(A)^T, so B comes first.
    const void* c_matrix = shape_.c == GemmShape::C::Full ? c : y.data;
    lt_check(lt.matmul(lt.handle, plan_.desc, &alpha, b.data, plan_.a, a.data, plan_.b, &beta,
                       c_matrix, plan_.c, y.data, plan_.c, &plan_.algo, workspace_.data(),
                       kWorkspaceBytes, gpu_stream(stream).handle()),
             "cublasLtMatmul");
    if (shape_.post) {
      check_launch(kernels::launch_unary(shape_.post_params, *float_type(dtype_), y.data, y.data,
                                         y.numel(), gpu_stream(stream).handle()),
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
    const bool bias = shape_.c == GemmShape::C::Bias;
    if (bias || shape_.relu) {
      const cublasLtEpilogue_t epilogue =
          bias ? (shape_.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
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

  GemmShape shape_;
  DataType dtype_;
  std::string label_;
  DeviceBuffer workspace_;
  Plan plan_;
};

std::string check_node(const ir::Node& node) {
  GemmShape shape;
  std::string why = check(node, shape);
  if (why.empty() && !cublaslt().ok()) why = cublaslt().error;
  return why;
}

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  GemmShape shape;
  check(node, shape);
  return std::make_unique<GemmKernel>(static_cast<GpuBackendImpl&>(backend), node, shape);
}

KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "MatMul",
                      .name = kGemmKernel,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Gemm",
                      .name = kGemmKernel,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedMatMul",
                      .name = kGemmKernel,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedGemm",
                      .name = kGemmKernel,
                      .check = check_node,
                      .create = create});

}  // namespace
}  // namespace kiln::backends::gpu

#else  // AMD: hipBLASLt would take cuBLASLt's place; ROCm 5.2 (this build's) has none.

#include "backends/gpu/runtime/missing_library.hpp"

namespace kiln::backends::gpu {
namespace {

const bool kRegistered = register_missing_library(
    "hipBLASLt", "gpu.gemm",
    {{"", "MatMul"}, {"", "Gemm"}, {"ai.kiln", "FusedMatMul"}, {"ai.kiln", "FusedGemm"}});

}  // namespace
}  // namespace kiln::backends::gpu
#endif
