// MatMul, Gemm, ai.kiln FusedMatMul and FusedGemm through Kiln's own GEMM (kernels/gemm.hip):
// float32 and float16 (accumulated in float32), 2-D, batched and broadcast-batch products,
// Gemm's transA / transB / alpha / beta and its C of any shape that broadcasts to [M, N], and
// every fused activation. On AMD it is the GEMM (ROCm 5.2 has no hipBLASLt); on NVIDIA it comes
// after cuBLASLt (gpu.gemm) unless KILN_GPU_OWN_KERNELS prefers Kiln's own kernels.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "backends/gpu/kernels/gemm.hpp"
#include "backends/gpu/runtime/gemm_node.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {
namespace {

constexpr const char* kOwnGemmKernel = "gpu.own.gemm";

// The product of `node` when every operand's shape is known before the run, else none.
std::optional<GemmDims> static_dims(const GemmNode& g, const ir::Node& node) {
  DeviceTensor operands[2];
  for (int i = 0; i < 2; ++i) {
    const TypeInfo& t = node.input(i)->type();
    if (!t.shape || !t.shape->is_static()) return std::nullopt;
    operands[i] = {g.dtype, t.shape->values(), nullptr, Layout::row_major()};
  }
  try {
    return gemm_dims(g, operands[0], operands[1], node.name());
  } catch (const Error&) {
    return std::nullopt;  // the run reports it, with the run's dims
  }
}

class OwnGemmKernel final : public Kernel {
 public:
  OwnGemmKernel(GpuBackendImpl& backend, const ir::Node& node, const GemmNode& g)
      : g_(g),
        label_(node.name()),
        matrix_tiles_(has_matrix_tiles(backend.device_info())),
        wgmma_(has_wgmma(backend.device_info())),
        multiprocessors_(backend.device_info().multiprocessors) {
    // A block tile forced for measurements (kernels::gemm_tile_names lists them); read once.
    if (const char* tile = std::getenv("KILN_GPU_GEMM_TILE")) tile_ = tile;
    trace_ = std::getenv("KILN_GPU_TRACE") != nullptr;
    // Split-K's partials, for a product known now: allocated here, not in a run, which may be
    // captured into a graph. Products of run-time shapes do not split.
    if (const std::optional<GemmDims> d = static_dims(g_, node)) {
      const int64_t floats = kernels::gemm_partial_floats(args_for(*d, nullptr));
      if (floats > 0) {
        partials_ = backend.allocate(static_cast<size_t>(floats) * sizeof(float));
        partial_capacity_ = floats;
      }
    }
  }
  std::string_view name() const override { return kOwnGemmKernel; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    KILN_CHECK(a.layout.is_row_major() && b.layout.is_row_major() && a.dtype == g_.dtype &&
                   b.dtype == g_.dtype,
               ErrorCode::Internal, "{} {}: operands not row-major {}", name(), label_,
               dtype_name(g_.dtype));
    const GemmDims d = gemm_dims(g_, a, b, label_);
    DeviceTensor y = outputs.allocate(0, g_.dtype, d.out_dims);
    if (y.numel() == 0) return;
    kernels::GemmArgs args = args_for(d, &y);
    args.a = a.data;
    args.b = b.data;
    if (g_.c != GemmNode::C::None) {
      // Gemm's C (or FusedMatMul's bias) broadcast over Y's [M, N] by its run-time dims.
      const DeviceTensor& c = in[2];
      KILN_CHECK(c.layout.is_row_major() && c.dtype == g_.dtype, ErrorCode::Internal,
                 "{} {}: C not row-major {}", name(), label_, dtype_name(g_.dtype));
      const size_t rank = c.dims.size();
      const int64_t rows = rank == 2 ? c.dims[0] : 1, cols = rank >= 1 ? c.dims.back() : 1;
      KILN_CHECK_ARG(rank <= 2 && (rows == 1 || rows == d.m) && (cols == 1 || cols == d.n),
                     "{} {}: C {} does not broadcast to [{}, {}]", name(), label_,
                     dims_to_string(c.dims), d.m, d.n);
      args.c = c.data;
      args.beta = g_.beta;
      args.c_row_stride = rows == 1 ? 0 : cols;
      args.c_col_stride = cols == 1 ? 0 : 1;
    }
    if (trace_ && !traced_) {
      traced_ = true;
      std::fprintf(
          stderr, "kiln gpu: %s %s: M %lld N %lld K %lld batch %lld: tile %s, %d part(s) of K\n",
          name().data(), label_.c_str(), static_cast<long long>(d.m), static_cast<long long>(d.n),
          static_cast<long long>(d.k), static_cast<long long>(d.batch),
          kernels::gemm_tile_name(args), kernels::gemm_splits(args));
    }
    check_launch(kernels::launch_gemm(args, gpu_stream(stream).handle()), name());
  }

 private:
  // Everything of a run's launch but the operands and C.
  kernels::GemmArgs args_for(const GemmDims& d, const DeviceTensor* y) const {
    kernels::GemmArgs args;
    args.type = *float_type(g_.dtype);
    args.y = y ? y->data : nullptr;
    args.m = d.m, args.n = d.n, args.k = d.k, args.batch = d.batch;
    args.trans_a = g_.trans_a, args.trans_b = g_.trans_b;
    args.stride_a = d.stride_a, args.stride_b = d.stride_b;
    args.alpha = g_.alpha;
    args.activation = g_.activation;
    args.act_alpha = g_.act_alpha, args.act_beta = g_.act_beta;
    args.matrix_tiles = matrix_tiles_;
    args.wgmma = wgmma_;
    args.multiprocessors = multiprocessors_;
    args.tile = tile_.c_str();
    args.partials = partial_capacity_ > 0 ? static_cast<float*>(partials_.data()) : nullptr;
    args.partial_capacity = partial_capacity_;
    return args;
  }

  GemmNode g_;
  std::string label_;
  bool matrix_tiles_;
  bool wgmma_;
  int multiprocessors_;
  std::string tile_;
  bool trace_ = false;
  bool traced_ = false;    // the tile of the first run is printed (KILN_GPU_TRACE)
  DeviceBuffer partials_;  // split-K's, for the node's static product (none: no split)
  int64_t partial_capacity_ = 0;
};

std::string check_node(const ir::Node& node) {
  GemmNode g;
  return read_gemm_node(node, g);
}

std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node) {
  return make_own_gemm_kernel(static_cast<GpuBackendImpl&>(backend), node);
}

// Priority -1: after a vendor library's GEMM (gpu.gemm) where there is one, unless the
// backend's KernelPreference puts Kiln's own kernels first.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "MatMul",
                      .name = kOwnGemmKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Gemm",
                      .name = kOwnGemmKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedMatMul",
                      .name = kOwnGemmKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .domain = "ai.kiln",
                      .op_type = "FusedGemm",
                      .name = kOwnGemmKernel,
                      .priority = -1,
                      .check = check_node,
                      .create = create});

}  // namespace

std::unique_ptr<Kernel> make_own_gemm_kernel(GpuBackendImpl& backend, const ir::Node& node) {
  GemmNode g;
  read_gemm_node(node, g);
  return std::make_unique<OwnGemmKernel>(backend, node, g);
}

}  // namespace kiln::backends::gpu
