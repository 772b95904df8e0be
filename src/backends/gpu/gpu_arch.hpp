#pragma once
// A GPU target as data: what an engine is compiled for and what a device is, in one spelling
// ("cuda:sm_90", "hip:gfx90a:sramecc+:xnack-"), plus what follows from the arch alone (the
// matrix instructions its kernels may use, its wavefront). Host code only: no GPU headers, so
// the compiler, the engine stamp and the CLI use it where no GPU or driver exists.
#include <string>
#include <string_view>
#include <vector>

namespace kiln::backends {

struct GpuTarget {
  std::string vendor;                 // "cuda" or "hip"
  std::string arch;                   // "sm_90", "gfx90a"
  std::vector<std::string> features;  // AMD target features as the driver reports them
                                      // ("sramecc+", "xnack-"), in its order

  // "cuda:sm_90", "hip:gfx90a:sramecc+:xnack-".
  std::string to_string() const;
  bool operator==(const GpuTarget&) const = default;
};

// Parses what GpuTarget::to_string writes; "gpu" alone is not a target (the caller resolves it
// to the device present). Throws InvalidArgument naming what is wrong.
GpuTarget parse_gpu_target(std::string_view text);

// The target of a device as its runtime describes it: NVIDIA by compute capability, AMD by the
// gcnArchName string ("gfx90a:sramecc+:xnack-").
GpuTarget cuda_target(int major, int minor);
GpuTarget hip_target(std::string_view gcn_arch_name);

// Matrix instructions kernels for `target` may use, by the arch alone ("mma.sync.f16",
// "mfma.f32.16x16x16f16", "wgmma"); empty where only plain FMA exists (RDNA 2, pre-Volta).
std::vector<std::string> matrix_instructions(const GpuTarget& target);

// Threads per warp/wavefront the arch runs by default: 32 on NVIDIA and RDNA, 64 on GCN/CDNA.
int default_wavefront_size(const GpuTarget& target);

}  // namespace kiln::backends
