#pragma once
// Kiln's own GEMM (gpu.own.gemm) against the vendor library's (gpu.gemm: cuBLASLt) on the GEMMs
// of real models, through the backend's kernels themselves (one-node graphs, created by kernel
// name), timed with device events on the compute stream: `kiln devices --gemm`.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/gpu/gpu_backend.hpp"

namespace kiln::backends {

struct GemmBenchShape {
  std::string label;  // "resnet50 b64 1x1 56x56 64->256"
  int64_t m = 0, n = 0, k = 0;
  bool trans_b = false;  // Gemm with B [N, K] (a convolution's weights), else MatMul [K, N]
};

struct GemmBenchKernel {
  std::string kernel;  // "gpu.own.gemm", "gpu.gemm"
  std::string error;   // set when the kernel cannot run here (no cuBLASLt: why)
  double median_ms = 0;
  double tflops = 0;
};

struct GemmBenchRow {
  GemmBenchShape shape;
  GemmBenchKernel own, library;
  // max |own - library| / max |library| over Y (both ran), else -1.
  double max_rel_diff = -1;
};

// The 1x1 convolutions of ResNet-50 as GEMMs (channels-last: [batch H W, Cin] x [Cin, Cout],
// weights [Cout, Cin]) for batches 1 and 64, and BERT-base's projections and feed-forward
// ([128 batch, K] x [K, N]) for batches 1 and 32.
std::vector<GemmBenchShape> model_gemm_shapes();

// Times each shape in float16 (random operands in [-1, 1)): after warm-up runs, `rounds`
// interleaved rounds of `runs` back-to-back runs of each kernel between two events; the median
// round, per run.
std::vector<GemmBenchRow> measure_gemms(GpuBackend& gpu, const std::vector<GemmBenchShape>& shapes,
                                        int rounds, int runs);

}  // namespace kiln::backends
