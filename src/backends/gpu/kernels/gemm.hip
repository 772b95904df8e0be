// Kiln's own GEMM: Y = act(alpha op(A) op(B) + beta C) for any M, N, K, batched, with both
// transposes (the kernel: gemm_kernel.hpp). This file chooses the block tile by shape and hands
// the product to the tile op's launcher, each in a source of its own (gemm_f32.hip,
// gemm_f16.hip, gemm_f16_fma.hip).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/gpu/kernels/gemm_kernel.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

using gemm_impl::SplitK;
using gemm_impl::TileId;

// Every NVIDIA arch the library is built for (sm_80+) has mma.sync: no FMA tiles for fp16 there.
#if defined(__CUDACC__)
constexpr bool kF16FmaTiles = false;
constexpr bool kWarpgroupTiles = true;
#else
constexpr bool kF16FmaTiles = true;
constexpr bool kWarpgroupTiles = false;
#endif

struct TileInfo {
  TileId id;
  int bm, bn;
  // Throughput of the tile relative to the big one, per output: the big tile reads 1/128 + 1/128
  // operand rows per output and step, the 128 x 64 one 1.5 times that with the same warp tiles,
  // the 64 x 64 one twice that with warp tiles of half the size (more fragment loads per mma).
  double efficiency;
  const char* f16_name;
  const char* f32_name;  // null: float16 on matrix tiles only
  int f16_bk, f32_bk;
};
constexpr TileInfo kTiles[] = {
    {TileId::Big, 128, 128, 1.0, "128x128x32", "128x128x16", 32, 16},
    {TileId::Mid, 128, 64, 0.9, "128x64x32", "128x64x16", 32, 16},
    {TileId::Small, 64, 64, 0.7, "64x64x32", "64x64x16", 32, 16},
    // NVIDIA float16 on matrix tiles: Big's place (measured 2-13 % faster where Big won).
    {TileId::Deep, 128, 128, 1.08, "128x128x64", nullptr, 64, 0},
    // Candidates, never chosen by shape (efficiency 0): forced by name to be measured.
    {TileId::Wide, 128, 128, 0.0, "w128x128x32", nullptr, 32, 0},
    {TileId::WideDeep, 128, 128, 0.0, "w128x128x64", nullptr, 64, 0},
    {TileId::Tall, 256, 128, 0.0, "w256x128x32", nullptr, 32, 0},
    {TileId::Mid2, 128, 64, 0.0, "m128x64x32", nullptr, 32, 0},
    {TileId::Pair, 128, 64, 0.0, "p128x64x32", nullptr, 32, 0},
    // NVIDIA sm_90 float16 on wgmma (gemm_f16_wgmma.cu), where it can take the product: two
    // blocks a multiprocessor with 4 and 3 stages (on the H100, 2026-12-06: 1.27x and 1.29x
    // cuBLASLt's time in geomean over 22 shapes when forced everywhere, against 1.37x for the
    // one-block tiles by shape; bench/results/2026-12-06b-gpu-h100-wgmma.md).
    {TileId::Warpgroup128Pair, 128, 128, 2.2, "h128x128x64", nullptr, 64, 0},
    {TileId::Warpgroup64Pair, 128, 64, 1.8, "h128x64x64", nullptr, 64, 0},
    // Candidates: one block a multiprocessor with deep rings (slower but on K >= 2048), and a
    // producer warpgroup with a persistent grid (correct, 1.75x: cp.async copies leave the
    // producer waiting on its own copies; the bulk tensor copies are its next step).
    {TileId::Warpgroup256, 128, 256, 0.0, "g128x256x64", nullptr, 64, 0},
    {TileId::Warpgroup128, 128, 128, 0.0, "g128x128x64", nullptr, 64, 0},
    {TileId::Warpgroup64, 128, 64, 0.0, "g128x64x64", nullptr, 64, 0},
    {TileId::Specialized128, 128, 128, 0.0, "s128x128x64", nullptr, 64, 0},
    // The same with its stages copied by bulk tensor copies (a convolution takes cp.async).
    {TileId::Bulk128, 128, 128, 0.0, "t128x128x64", nullptr, 64, 0},
    {TileId::Bulk256, 128, 256, 0.0, "t128x256x64", nullptr, 64, 0},
};
static_assert(gemm_impl::F16Tiles::Big::BK == 32 && gemm_impl::F32Tiles::Big::BK == 16 &&
              gemm_impl::F16Tiles::Deep::BK == 64);

bool is_warpgroup(TileId id) {
  return id == TileId::Warpgroup64 || id == TileId::Warpgroup128 || id == TileId::Warpgroup256 ||
         id == TileId::Warpgroup64Pair || id == TileId::Warpgroup128Pair ||
         id == TileId::Specialized128 || id == TileId::Bulk128 || id == TileId::Bulk256;
}

[[maybe_unused]] bool is_specialized(TileId id) {
  return id == TileId::Specialized128 || id == TileId::Bulk128 || id == TileId::Bulk256;
}

// What a product offers the tiles: its type, the device's matrix instructions, and whether the
// warpgroup tiles can take it.
struct TileNeeds {
  FloatType type;
  bool matrix_tiles;
  bool wgmma;
};

TileNeeds needs_of(const GemmArgs& p) {
  const bool f16_matrix = p.type == FloatType::F16 && p.matrix_tiles;
  return {p.type, p.matrix_tiles,
          kWarpgroupTiles && f16_matrix && p.wgmma && !p.trans_a && gemm_impl::operands_aligned(p)};
}

// Whether this build's launch_gemm can take tile `t` for a product (the NVIDIA float16 tiles
// need matrix tiles, the warpgroup ones wgmma and aligned rows).
bool available(const TileInfo& t, const TileNeeds& need) {
  if (t.id == TileId::Mid) return gemm_impl::kMidTile;
  if (t.id == TileId::Big || t.id == TileId::Small) return true;
  if (is_warpgroup(t.id)) return need.wgmma;
  return gemm_impl::kNvidiaTiles && need.type == FloatType::F16 && need.matrix_tiles;
}

// Candidates are taken only when forced.
bool by_shape(const TileInfo& t) {
  return t.efficiency > 0;
}

const char* name_of(const TileInfo& t, FloatType type) {
  return type == FloatType::F16 ? t.f16_name : t.f32_name;
}

constexpr int kMaxSplits = 16, kMinStepsPerSplit = 4;

int64_t output_tiles(const GemmArgs& p, const TileInfo& t) {
  return ((p.m + t.bm - 1) / t.bm) * ((p.n + t.bn - 1) / t.bn) * p.batch;
}
int64_t reduction_steps(const GemmArgs& p, const TileInfo& t) {
  const int bk = p.type == FloatType::F16 ? t.f16_bk : t.f32_bk;
  return (p.k + bk - 1) / bk;
}
// Split-K by a model of the busiest multiprocessor (KILN_GPU_SPLIT_SLOTS=1, opt-in until it
// has been timed on a GPU). The default rule splits only products whose tiles fill under half
// the multiprocessors; it leaves ResNet-50 b64's 7x7 products (M 3136, N 512: 100 two-block
// tiles on an H100's 132 multiprocessors) in one part, each multiprocessor running one block
// of a tile sized to share it with another.
bool split_by_model() {
  static const bool on = [] {
    const char* e = std::getenv("KILN_GPU_SPLIT_SLOTS");
    return e && std::strcmp(e, "1") == 0;
  }();
  return on;
}
// Partials a kernel may allocate for its split. Under the model, 4x: two parts of those 7x7
// products take 12.8 MB (an experiment: each node holds its own).
int64_t max_partial_floats() {
  return split_by_model() ? 4 * kMaxGemmPartialFloats : kMaxGemmPartialFloats;
}

// Whether the reduction is split by the default rule: the output tiles fill under half the
// multiprocessors and there are at least two parts' worth of steps (choose_split; the capacity
// may still say one).
bool splits_reduction(const GemmArgs& p, const TileInfo& t) {
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : 1;
  return output_tiles(p, t) * 2 <= sms && reduction_steps(p, t) >= 2 * kMinStepsPerSplit;
}

// The model's cost of a split into `count` parts, in reduction steps of one block: the busiest
// multiprocessor runs ceil(blocks / multiprocessors) blocks of ceil(steps / count) steps, each
// part also writing its float32 partial tile and the finishing kernel reading them back (about
// kPartialSteps steps' time each, spread over the multiprocessors). A two-block tile alone on
// a multiprocessor has no partner to hide its waits behind: it runs at kLoneBlockSpeed. Both
// constants are estimates for the H100, to be replaced by what a GPU measures.
constexpr double kPartialSteps = 4.0, kLoneBlockSpeed = 0.6;
double split_cost(const GemmArgs& p, const TileInfo& t, int64_t count) {
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : 1;
  const int64_t tiles = output_tiles(p, t), blocks = tiles * count;
  const int64_t busiest = (blocks + sms - 1) / sms;
  const int64_t steps = (reduction_steps(p, t) + count - 1) / count;
  const bool pair = t.id == TileId::Warpgroup128Pair || t.id == TileId::Warpgroup64Pair;
  const double partial = count > 1 ? kPartialSteps : 0.0;
  double cost = static_cast<double>(busiest) * (static_cast<double>(steps) + partial);
  if (pair && busiest == 1) cost /= kLoneBlockSpeed;
  if (count > 1) cost += static_cast<double>(blocks) * kPartialSteps / static_cast<double>(sms);
  return cost;
}

// The share of the multiprocessors' block slots that a product's output tiles use over the
// waves they need (one tile a multiprocessor at a time).
double wave_fill(const GemmArgs& p, const TileInfo& t) {
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : 1;
  const int64_t tiles = output_tiles(p, t);
  return static_cast<double>(tiles) / static_cast<double>((tiles + sms - 1) / sms * sms);
}

const TileInfo& tile_with_id(TileId id) {
  for (const TileInfo& t : kTiles)
    if (t.id == id) return t;
  __builtin_unreachable();  // every TileId has its row in kTiles
}

// The tile that finishes first by a simple model: the busiest multiprocessor runs
// ceil(tiles / multiprocessors) blocks one after another, each costing its area (padding
// included) over its efficiency. So a product that fills the GPU several times takes the big
// tile; one whose big tiles would leave most multiprocessors idle, or whose N is 64, a smaller
// one. KILN_GPU_GEMM_TILE (GemmArgs::tile) overrides it.
const TileInfo& choose_tile(const GemmArgs& p) {
  const TileNeeds need = needs_of(p);
  if (p.tile && *p.tile) {
    for (const TileInfo& t : kTiles) {
      if (available(t, need) &&
          std::strncmp(name_of(t, p.type), p.tile, std::strlen(p.tile)) == 0) {
        return t;
      }
    }
  }
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : 1;
  const TileInfo* best = nullptr;
  double best_cost = 0;
  for (const TileInfo& t : kTiles) {
    if (!available(t, need) || !by_shape(t)) continue;
    const int64_t per_sm = (output_tiles(p, t) + sms - 1) / sms;
    const double cost = static_cast<double>(per_sm) * t.bm * t.bn / t.efficiency;
    if (!best || cost < best_cost) best = &t, best_cost = cost;
  }
  // A product that will be split (its tiles fill under half the multiprocessors, 8 steps or
  // more) takes the wide two-block wgmma tile where the model chose the narrow one: on the
  // H100 it was as fast or faster on each of the six such shapes measured (BERT-base b1's FFN
  // up 1.24x cuBLASLt's time against 1.79x; bench/results/2026-12-06b-gpu-h100-wgmma.md).
  if (best->id == TileId::Warpgroup64Pair && splits_reduction(p, *best)) {
    return tile_with_id(TileId::Warpgroup128Pair);
  }
  // A plain product of many rows, a long reduction and N a multiple of 256 takes the 128 x 256
  // bulk-copy tile (persistent, one block a multiprocessor): on the H100 it took 1.36-1.67x
  // cuBLASLt's time on BERT-base b32's products against 1.62-1.85x for the two-block tiles,
  // and 1.53x against 1.79x on ResNet-50 b64's 14x14 1024->256; on shorter reductions or fewer
  // rows it was slower (bench/results/2026-12-06d-gpu-own-gemm-tma.md).
  // Unless its 128 x 128 sibling fills the last wave of multiprocessors much better: ResNet-50
  // b64's 14x14 1024 -> 512 (196 wide tiles on 132 multiprocessors fill 74 % of two waves, 392
  // narrow ones 99 % of three) took 41 us on the narrow tile against 50 on the wide one (H100,
  // bench/results/2026-12-07c-gpu-own-conv-rules-h100.md); BERT's products fill both alike.
  if (need.wgmma && !p.conv_a && p.m >= 4096 && p.k >= 768 && p.n % 256 == 0) {
    const TileInfo& wide = tile_with_id(TileId::Bulk256);
    const TileInfo& narrow = tile_with_id(TileId::Bulk128);
    return wave_fill(p, narrow) > 1.15 * wave_fill(p, wide) ? narrow : wide;
  }
  // A convolution of several filter taps over channels in multiples of 64, with 128 filters or
  // more, takes the 128 x 128 bulk-copy tile, whose A the tensor engine copies in im2col mode:
  // on the H100 ResNet-50 b64's 3x3 convolutions from layer2 on took 0.59-0.88x the time of the
  // tile by shape (layer4's 80 -> 47 us); with 64 filters it was slower (layer1: 83 -> 102 us),
  // and a 1x1 convolution runs as a plain product (bench/results/2026-12-07-gpu-h100.md).
  if (need.wgmma && p.conv_a && p.conv.r * p.conv.s > 1 && p.conv.c % 64 == 0 && p.n >= 128) {
    return tile_with_id(TileId::Bulk128);
  }
  // A plain product whose reduction is at least four times N and 2048 long (ResNet-50's 7x7
  // 2048 -> 512): its 128 x 128 tiles fill more multiprocessors than the 128 x 256 ones, and
  // the bulk copies keep its long reduction fed: 1.45x cuBLASLt's time against 1.68x for the
  // tile by shape on the H100 (bench/results/2026-12-06d-gpu-own-gemm-tma.md); as this rule,
  // ResNet-50 b64's 7x7 2048 -> 512 32.5 -> 22.7 us (2026-12-07c-gpu-own-conv-rules-h100.md).
  if (need.wgmma && !p.conv_a && p.k >= 2048 && p.k >= 4 * p.n && p.n % 64 == 0) {
    return tile_with_id(TileId::Bulk128);
  }
  return *best;
}

// Split-K (GemmArgs::partials): a product whose reduction splits_reduction cuts is cut into as
// many parts as fill the multiprocessors (at most 16, each of at least 4 steps), as far as
// `capacity` floats of partials allow; the parts are then evened out. Under the model
// (split_by_model), the count of least split_cost instead. Otherwise one part.
SplitK choose_split(const GemmArgs& p, const TileInfo& t, int64_t capacity) {
  const int64_t sms = p.multiprocessors > 0 ? p.multiprocessors : 1;
  const int64_t tiles = output_tiles(p, t);
  const int64_t steps = reduction_steps(p, t);
  const int64_t per_part = p.batch * p.m * p.n;
  SplitK one{1, static_cast<int>(steps)};
  const int64_t most = std::min<int64_t>(steps / kMinStepsPerSplit, kMaxSplits);
  int64_t count = 1;
  if (split_by_model()) {
    double best = split_cost(p, t, 1);
    for (int64_t c = 2; c <= most && c * per_part <= capacity; ++c) {
      const double cost = split_cost(p, t, c);
      if (cost < best) best = cost, count = c;
    }
  } else if (splits_reduction(p, t)) {
    count = std::min<int64_t>((sms + tiles - 1) / tiles, most);
    while (count > 1 && count * per_part > capacity) --count;
  }
  if (count < 2 || p.batch * count > 65535) return one;
  const int64_t per = (steps + count - 1) / count;
  return {static_cast<int>((steps + per - 1) / per), static_cast<int>(per)};
}

// Sums the parts of a split reduction and finishes the epilogue: Y = act(sum + beta C).
template <typename T>
__global__ void finish_split(GemmArgs p, int count) {
  const int64_t mn = p.m * p.n, total = p.batch * mn;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const T* c = static_cast<const T*>(p.c);
  T* y = static_cast<T*>(p.y);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t z = i / mn, at = i % mn;
    const float* part = p.partials + z * count * mn + at;
    float v = 0.f;
    for (int s = 0; s < count; ++s) v += part[s * mn];
    const int64_t row = at / p.n, col = at % p.n;
    if (p.bias) v += to_float(static_cast<const T*>(p.bias)[col]);
    if (c) {
      v += p.beta * to_float(c[z * p.c_batch_stride + row * p.c_row_stride + col * p.c_col_stride]);
    }
    y[i] = from_float<T>(apply_activation(p.activation, v, p.act_alpha, p.act_beta));
  }
}

hipError_t launch_finish_split(const GemmArgs& p, int count, hipStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t total = p.batch * p.m * p.n;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 4096);
  if (p.type == FloatType::F16) {
    hipLaunchKernelGGL(finish_split<__half>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                       stream, p, count);
  } else {
    hipLaunchKernelGGL(finish_split<float>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                       stream, p, count);
  }
  return hipGetLastError();
}

}  // namespace

int64_t gemm_partial_floats(const GemmArgs& args) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return 0;
  const SplitK split = choose_split(args, choose_tile(args), max_partial_floats());
  return split.count > 1 ? split.count * args.batch * args.m * args.n : 0;
}

int gemm_splits(const GemmArgs& args) {
  if (!args.partials || args.m <= 0 || args.n <= 0 || args.batch <= 0) return 1;
  return choose_split(args, choose_tile(args), args.partial_capacity).count;
}

const char* gemm_tile_name(const GemmArgs& args) {
  return name_of(choose_tile(args), args.type);
}

const char* gemm_tile_names(FloatType type) {
  // Built once per type from the table (what a forced tile may name).
  static const std::string names[2] = {
      [] {
        std::string all;
        for (const TileInfo& t : kTiles) {
          if (available(t, {FloatType::F32, false, false}))
            all += std::string(all.empty() ? "" : " ") + t.f32_name;
        }
        return all;
      }(),
      [] {
        std::string all;
        for (const TileInfo& t : kTiles) {
          if (available(t, {FloatType::F16, true, kWarpgroupTiles}))
            all += std::string(all.empty() ? "" : " ") + t.f16_name;
        }
        return all;
      }()};
  return names[type == FloatType::F16 ? 1 : 0].c_str();
}

namespace gemm_impl {

hipError_t allow_dynamic_smem(const void* kernel, size_t bytes, unsigned long long& devices_done) {
  int device = 0;
  hipError_t status = hipGetDevice(&device);
  if (status != hipSuccess) return status;
  const unsigned long long bit = device < 64 ? 1ull << device : 0;
  // Benign race: two threads may both set the attribute, to the same value.
  if (bit && (__atomic_load_n(&devices_done, __ATOMIC_ACQUIRE) & bit)) return hipSuccess;
  status = hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes));
  if (status == hipSuccess && bit) __atomic_fetch_or(&devices_done, bit, __ATOMIC_RELEASE);
  return status;
}

}  // namespace gemm_impl

hipError_t launch_gemm(const GemmArgs& p, hipStream_t stream) {
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return hipSuccess;
  if (p.conv_a) {
    // The implicit A's indices are 32-bit within an image, an output plane and the reduction.
    const ConvGeometry& g = p.conv;
    const bool fits = g.h > 0 && g.w > 0 && g.c > 0 && g.oh > 0 && g.ow > 0 && g.r > 0 && g.s > 0 &&
                      g.h * g.w * g.c < (int64_t{1} << 31) && g.oh * g.ow < (int64_t{1} << 31) &&
                      p.k == int64_t{g.r} * g.s * g.c && p.k < (int64_t{1} << 31) &&
                      p.m % (g.oh * g.ow) == 0;
    if (!fits || p.batch != 1 || p.trans_a || !p.trans_b) return hipErrorInvalidValue;
  }
  const TileInfo& info = choose_tile(p);
  const TileId tile = info.id;
  const SplitK split = p.partials ? choose_split(p, info, p.partial_capacity) : SplitK{};
  hipError_t status = hipErrorInvalidValue;
  switch (p.type) {
    case FloatType::F32:
      status = gemm_impl::launch_f32(p, tile, split, stream);
      break;
    case FloatType::F16:
      if (is_warpgroup(tile)) {
        if constexpr (kWarpgroupTiles) {
          status = is_specialized(tile) ? gemm_impl::launch_f16_wgmma_ws(p, tile, split, stream)
                                        : gemm_impl::launch_f16_wgmma(p, tile, split, stream);
        }
      } else if (p.matrix_tiles) {
        status = gemm_impl::launch_f16_matrix(p, tile, split, stream);
      } else if constexpr (kF16FmaTiles) {
        status = gemm_impl::launch_f16_fma(p, tile, split, stream);
      }
      break;
    case FloatType::BF16:
      break;
  }
  if (status != hipSuccess || split.count == 1) return status;
  return launch_finish_split(p, split.count, stream);
}

}  // namespace kiln::backends::gpu::kernels
