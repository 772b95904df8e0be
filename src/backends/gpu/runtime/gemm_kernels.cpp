// MatMul and Gemm (and Kiln's FusedMatMul / FusedGemm with any fused activation) on the GPU through
// cuBLASLt (NVIDIA; hipBLASLt would serve AMD where ROCm has it, and ROCm 5.2 has none): float32
// (computed in float32, no TF32) and float16 (accumulated in float32), 2-D and batched products,
// Gemm's transA/transB/alpha, and its C as a bias row (beta 1, cuBLASLt's bias epilogue) or a
// full [M, N] matrix with any beta; a fused Relu is the epilogue, and so is a Gelu (cuBLASLt's tanh
// form: takes_library_gelu says when), another activation an element-wise pass over the result
// (its point function, as the reference computes it). Which
// nodes it takes is decided from the declared types and shapes (gemm_node.hpp); the rest go to
// Kiln's own GEMM (own_gemm_kernels.cpp) or fall back to the CPU with the reason.
//
// Tactic (KILN_GPU_GEMM_TACTICS=1; opt-in until it has run on a GPU: written on 2026-12-06, when
// no device could be had): a float16 product is also timed, at its first run with each set of
// dims, on Kiln's own GEMM (which fuses every activation into its epilogue: no second pass), and
// runs on whichever was faster; the choices are stored in the engine (tactics()), as the
// convolutions' are.
#if defined(KILN_GPU_CUDA) && !defined(__HIP__)
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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
  bool gelu = false;  // the node's Gelu is cuBLASLt's epilogue
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
      : backend_(backend),
        shape_(shape),
        post_(gemm_activation_params(shape)),
        dtype_(node.input(0)->type().dtype),
        library_gelu_(takes_library_gelu(shape, dtype_)),
        label_(node.name()),
        workspace_(backend.allocate(kWorkspaceBytes)) {
    const char* tactics = std::getenv("KILN_GPU_GEMM_TACTICS");
    if (dtype_ == DataType::Float16 && has_matrix_tiles(backend.device_info()) && tactics &&
        std::strcmp(tactics, "1") == 0) {
      own_ = make_own_gemm_kernel(backend, node);
    }
  }
  ~GemmKernel() override { plan_.reset(cublaslt()); }
  std::string_view name() const override { return kGemmKernel; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    KILN_CHECK(a.layout.is_row_major() && b.layout.is_row_major() && a.dtype == dtype_ &&
                   b.dtype == dtype_,
               ErrorCode::Internal, "gpu.gemm {}: operands not row-major {}", label_,
               dtype_name(dtype_));
    // Row-major [M, K] x [K, N] (before transposes), with a batch of `batch` products.
    const GemmDims d = gemm_dims(shape_, a, b, label_);
    DeviceTensor y = outputs.allocate(0, dtype_, d.out_dims);
    if (y.numel() == 0) return;
    const std::vector<int64_t> key = {d.m, d.n, d.k, d.batch, d.stride_a, d.stride_b};
    if (own_) {
      auto chosen = use_own_.find(key);
      if (chosen == use_own_.end())
        chosen = use_own_.emplace(key, own_is_faster(in, y, key, stream)).first;
      if (chosen->second) {
        SameOutput same(y);
        own_->run(in, same, stream);
        return;
      }
    }
    run_library(in, y, key, stream);
  }

  // One entry per set of dims timed: "M,N,K,batch,stride_a,stride_b=own" (1: Kiln's own GEMM,
  // 0: cuBLASLt), joined by ';'.
  std::string tactics() const override {
    std::string out;
    for (const auto& [key, own] : use_own_) {
      if (!out.empty()) out += ';';
      out += fmt::format("{}={:d}", fmt::join(key, ","), own);
    }
    return out;
  }
  void use_tactics(std::string_view text) override {
    if (!own_) return;
    std::map<std::vector<int64_t>, bool> parsed;
    for (std::string_view entry : split_text(text, ';')) {
      const size_t eq = entry.find('=');
      std::vector<int64_t> key, choice;
      if (eq == std::string_view::npos || !parse_int_list(entry.substr(0, eq), key) ||
          key.size() != 6 || !parse_int_list(entry.substr(eq + 1), choice) || choice.size() != 1) {
        return;  // not this build's form: time afresh
      }
      parsed[key] = choice[0] != 0;
    }
    use_own_ = std::move(parsed);
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{4} << 20;

  // Times both GEMMs on this run's operands (a warm-up, then the median of five runs each,
  // device events on the stream; the first run with these dims is never recorded into a graph)
  // and says whether Kiln's own was faster. Both write the same Y.
  bool own_is_faster(std::span<const DeviceTensor> in, const DeviceTensor& y,
                     const std::vector<int64_t>& key, Stream& stream) {
    SameOutput same(y);
    auto median_ms = [&](auto&& run_once) {
      run_once();
      std::vector<double> ms;
      for (int i = 0; i < 5; ++i) {
        std::unique_ptr<Event> begin = backend_.create_event(), end = backend_.create_event();
        begin->record(stream);
        run_once();
        end->record(stream);
        end->synchronize();
        ms.push_back(end->elapsed_ms(*begin));
      }
      std::nth_element(ms.begin(), ms.begin() + 2, ms.end());
      return ms[2];
    };
    const double library = median_ms([&] { run_library(in, y, key, stream); });
    double own = 0;
    try {
      own = median_ms([&] { own_->run(in, same, stream); });
    } catch (const Error& e) {
      // A product the own GEMM refuses at the run (a launch past its grid limits): cuBLASLt's,
      // whose result the caller recomputes below.
      if (std::getenv("KILN_GPU_TRACE")) {
        std::fprintf(stderr, "kiln gpu: gpu.gemm %s: own GEMM refused: %s\n", label_.c_str(),
                     e.message().c_str());
      }
      return false;
    }
    if (std::getenv("KILN_GPU_TRACE")) {
      std::fprintf(stderr, "kiln gpu: gpu.gemm %s [%s]: cuBLASLt %.4f ms, own %.4f ms: %s\n",
                   label_.c_str(), fmt::format("{}", fmt::join(key, ",")).c_str(), library, own,
                   own < library ? "own" : "cuBLASLt");
    }
    return own < library;
  }

  void run_library(std::span<const DeviceTensor> in, const DeviceTensor& y,
                   const std::vector<int64_t>& key, Stream& stream) {
    const CublasLtApi& lt = cublaslt();
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    const void* c = nullptr;
    if (shape_.c != GemmNode::C::None) c = in[2].data;
    prepare(lt, key);
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
    plan_.gelu = library_gelu_;
    set_epilogue(lt, plan_.gelu);
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
    if (plan_.gelu && (s != CUBLAS_STATUS_SUCCESS || found == 0)) {
      // No algorithm with the Gelu epilogue at these dims: the plain one and the pass after.
      plan_.gelu = false;
      set_epilogue(lt, false);
      s = lt.heuristic(lt.handle, plan_.desc, plan_.a, plan_.b, plan_.c, plan_.c, pref, 1, &result,
                       &found);
    }
    lt.pref_destroy(pref);
    lt_check(s, "cublasLtMatmulAlgoGetHeuristic");
    KILN_CHECK(found > 0, ErrorCode::Unsupported,
               "gpu.gemm {}: cuBLASLt has no algorithm for [{}x{}] x [{}x{}] ({}, batch {})",
               label_, m, k, k, n, dtype_name(dtype_), batch);
    plan_.algo = result.algo;
  }

  // The bias and the activation in cuBLASLt's epilogue where it has them: Relu, and Gelu when
  // `gelu` (library_gelu_); none when the node has neither.
  void set_epilogue(const CublasLtApi& lt, bool gelu) {
    const bool bias = shape_.c == GemmNode::C::Row;
    const bool relu = shape_.activation == kernels::GemmActivation::Relu;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu) {
      epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    } else if (relu) {
      epilogue = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    } else if (bias) {
      epilogue = CUBLASLT_EPILOGUE_BIAS;
    }
    lt_check(lt.desc_set(plan_.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
             "cuBLASLt epilogue");
  }

  // An activation left for a pass after the product: anything but Relu and a Gelu that this
  // dims' plan has in its epilogue.
  bool has_post() const {
    return shape_.activation != kernels::GemmActivation::None &&
           shape_.activation != kernels::GemmActivation::Relu && !plan_.gelu;
  }

  // cuBLASLt's Gelu epilogue is the tanh form (0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
  // x^3)))): exactly a GeluTanh node, and within 4.7e-4 of the erf form everywhere (at most a
  // quarter of float16's spacing where that difference peaks, x near 2.7), so it also takes an
  // erf Gelu whose result is float16, unless KILN_GPU_EXACT_GELU=1 asks for the erf pass. One
  // pass over the result less: BERT-base's FFN up at batch 32 spent 18.9 us a layer in it.
  static bool takes_library_gelu(const GemmNode& shape, DataType dtype) {
    if (shape.activation == kernels::GemmActivation::GeluTanh) return true;
    if (shape.activation != kernels::GemmActivation::Gelu || dtype != DataType::Float16) {
      return false;
    }
    const char* exact = std::getenv("KILN_GPU_EXACT_GELU");
    return !(exact && std::strcmp(exact, "1") == 0);
  }

  GpuBackendImpl& backend_;
  GemmNode shape_;
  kernels::UnaryParams post_;  // the activation after the product (has_post())
  DataType dtype_;
  bool library_gelu_;  // the Gelu in cuBLASLt's epilogue (takes_library_gelu)
  std::string label_;
  DeviceBuffer workspace_;
  Plan plan_;
  std::unique_ptr<Kernel> own_;  // the tactic's other candidate (float16), else null
  std::map<std::vector<int64_t>, bool> use_own_;  // by the run's dims: own GEMM faster
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
