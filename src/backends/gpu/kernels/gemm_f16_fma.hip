// Kiln's own GEMM in float16 (accumulated in float32) on FMA tiles, for the AMD targets without
// matrix instructions (RDNA 2's gfx1030); on CDNA its kernels keep empty bodies. NVIDIA builds
// none of it: every arch the library is built for (sm_80+) has mma.sync (gemm_f16.hip).
#include "backends/gpu/kernels/gemm_kernel.hpp"

namespace kiln::backends::gpu::kernels::gemm_impl {

#if !defined(__CUDACC__)
hipError_t launch_f16_fma(const GemmArgs& p, TileId tile, SplitK split, hipStream_t stream) {
  return launch_op<TileKind::Fma, uint16_t, __half, F16Tiles>(p, tile, split, stream);
}
#endif

}  // namespace kiln::backends::gpu::kernels::gemm_impl
