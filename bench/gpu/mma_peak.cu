// The ceiling of mma.sync on this GPU: warps issuing only float16 m16n8k16 mma.sync (float32
// accumulators) on registers, several independent accumulators per warp so that the latency of
// one instruction hides behind the others. What Kiln's own GEMM (gpu.own.gemm, which multiplies
// with mma.sync) can reach at best, beside what the libraries reach with Hopper's wgmma.
//
//   nvcc -O3 -arch=sm_90 -o mma_peak bench/gpu/mma_peak.cu && ./mma_peak
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

constexpr int kChains = 8;  // independent accumulators per warp

__global__ void mma_loop(float* out, int iterations) {
  float acc[kChains][4] = {};
  const unsigned a0 = threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u,
                 b1 = a0 * 13u;
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
          "{%8, %9}, {%0, %1, %2, %3};\n"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  float s = 0.f;
  for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (s == 12345.f) out[threadIdx.x] = s;  // keeps the loop alive
}

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  float* out = nullptr;
  cudaMalloc(&out, 1024 * sizeof(float));
  constexpr int kIterations = 4096;
  std::printf("%s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
  for (int warps_per_sm : {4, 8, 16}) {
    const int blocks = prop.multiProcessorCount * warps_per_sm / 4;
    mma_loop<<<blocks, 128>>>(out, kIterations);
    cudaDeviceSynchronize();
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> ms;
    for (int r = 0; r < 7; ++r) {
      cudaEventRecord(start);
      mma_loop<<<blocks, 128>>>(out, kIterations);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float t = 0.f;
      cudaEventElapsedTime(&t, start, stop);
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double flops = 2.0 * 16 * 8 * 16 * kChains * double(kIterations) * blocks * 4;
    std::printf(
        "mma.sync f16 -> f32, %2d warps per multiprocessor: %.1f TFLOP/s (median %.3f ms)\n",
        warps_per_sm, flops / (ms[ms.size() / 2] * 1e-3) / 1e12, ms[ms.size() / 2]);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
