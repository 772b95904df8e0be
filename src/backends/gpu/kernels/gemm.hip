// Kiln's own GEMM: Y = act(alpha op(A) op(B) + beta C) for any M, N, K, batched, with both
// transposes (the kernel: gemm_kernel.hpp). This file chooses the block tile by shape and hands
// the product to the tile op's launcher, each in a source of its own (gemm_f32.hip,
// gemm_f16.hip, gemm_f16_fma.hip).
#include <cstring>

#include "backends/gpu/kernels/gemm_kernel.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

using gemm_impl::TileId;

// Every NVIDIA arch the library is built for (sm_80+) has mma.sync: no FMA tiles for fp16 there.
#if defined(__CUDACC__)
constexpr bool kF16FmaTiles = false;
#else
constexpr bool kF16FmaTiles = true;
#endif

struct TileInfo {
  TileId id;
  int bm, bn;
  // Throughput of the tile relative to the big one, per output: the big tile reads 1/128 + 1/128
  // operand rows per output and step, the 128 x 64 one 1.5 times that with the same warp tiles,
  // the 64 x 64 one twice that with warp tiles of half the size (more fragment loads per mma).
  double efficiency;
  const char* f16_name;
  const char* f32_name;
};
constexpr TileInfo kTiles[] = {
    {TileId::Big, 128, 128, 1.0, "128x128x32", "128x128x16"},
    {TileId::Mid, 128, 64, 0.9, "128x64x32", "128x64x16"},
    {TileId::Small, 64, 64, 0.7, "64x64x32", "64x64x16"},
};

bool available(const TileInfo& t) {
  return t.id != TileId::Mid || gemm_impl::kMidTile;
}

const char* name_of(const TileInfo& t, FloatType type) {
  return type == FloatType::F16 ? t.f16_name : t.f32_name;
}

// The tile that finishes first by a simple model: the busiest multiprocessor runs
// ceil(tiles / multiprocessors) blocks one after another, each costing its area (padding
// included) over its efficiency. So a product that fills the GPU several times takes the big
// tile; one whose big tiles would leave most multiprocessors idle, or whose N is 64, a smaller
// one. KILN_GPU_GEMM_TILE (GemmArgs::tile) overrides it.
const TileInfo& choose_tile(const GemmArgs& p) {
  if (p.tile && *p.tile) {
    for (const TileInfo& t : kTiles) {
      if (available(t) && std::strncmp(name_of(t, p.type), p.tile, std::strlen(p.tile)) == 0) {
        return t;
      }
    }
  }
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : 1;
  const TileInfo* best = nullptr;
  double best_cost = 0;
  for (const TileInfo& t : kTiles) {
    if (!available(t)) continue;
    const int64_t tiles = ((p.m + t.bm - 1) / t.bm) * ((p.n + t.bn - 1) / t.bn) * p.batch;
    const int64_t per_sm = (tiles + sms - 1) / sms;
    const double cost = static_cast<double>(per_sm) * t.bm * t.bn / t.efficiency;
    if (!best || cost < best_cost) best = &t, best_cost = cost;
  }
  return *best;
}

}  // namespace

const char* gemm_tile_name(const GemmArgs& args) {
  return name_of(choose_tile(args), args.type);
}

const char* gemm_tile_names(FloatType type) {
  if constexpr (gemm_impl::kMidTile) {
    return type == FloatType::F16 ? "128x128x32 128x64x32 64x64x32"
                                  : "128x128x16 128x64x16 64x64x16";
  }
  return type == FloatType::F16 ? "128x128x32 64x64x32" : "128x128x16 64x64x16";
}

hipError_t launch_gemm(const GemmArgs& p, hipStream_t stream) {
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return hipSuccess;
  const TileId tile = choose_tile(p).id;
  switch (p.type) {
    case FloatType::F32:
      return gemm_impl::launch_f32(p, tile, stream);
    case FloatType::F16:
      if (p.matrix_tiles) return gemm_impl::launch_f16_matrix(p, tile, stream);
      if constexpr (kF16FmaTiles) return gemm_impl::launch_f16_fma(p, tile, stream);
      return hipErrorInvalidValue;
    case FloatType::BF16:
      break;
  }
  return hipErrorInvalidValue;
}

}  // namespace kiln::backends::gpu::kernels
