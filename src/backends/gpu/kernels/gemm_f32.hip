// Kiln's own GEMM in float32: FMA tiles on every target (gemm_kernel.hpp).
#include "backends/gpu/kernels/gemm_kernel.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {

hipError_t launch_f32(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  return launch_op<TileKind::Fma, float, float, F32Tiles>(p, tile, split, stream);
}

}  // namespace kiln::backends::gpu::kernels::gemm_impl
