// Kiln's own GEMM in float16 (accumulated in float32) on matrix instructions: mma.sync with
// ldmatrix loads on NVIDIA, MFMA on CDNA (gemm_kernel.hpp, mma_tile.hpp). On RDNA 2 the
// kernels of this file keep empty bodies: gemm_f16_fma.hip serves it.
#include "backends/gpu/kernels/gemm_kernel.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {

hipError_t launch_f16_matrix(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  return launch_op<TileKind::Matrix, uint16_t, __half, F16Tiles>(p, tile, split, stream);
}

}  // namespace kiln::backends::gpu::kernels::gemm_impl
