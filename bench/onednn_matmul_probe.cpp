// oneDNN 2.6's float32 matmul (constant B packed once, as Kiln's onednn.matmul does) on one
// M x K x N shape: the kernel and the GFLOP/s of the median of 50 runs, beside an FMA-only loop
// that gives the CPU's float32 peak (12 independent zmm accumulators, AVX-512). The evidence
// that BERT's and ViT's products run at the hardware's peak (bench/results/2026-12-07r-*).
//
//   g++ -O2 -std=c++17 -mavx512f bench/onednn_matmul_probe.cpp -ldnnl -o /tmp/mm
//   OMP_NUM_THREADS=1 /tmp/mm M K N
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// FMAs on registers only: 12 independent chains hide the latency of two FMA pipes.
double fma_peak_gflops() {
  __m512 acc[12];
  const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const long n = 100000000;
  auto t0 = std::chrono::steady_clock::now();
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  }
  const double t = seconds_since(t0);
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += _mm512_reduce_add_ps(acc[i]);
  if (sink == 42.f) std::printf(" ");  // keeps the loop
  return n * 12 * 32.0 / t / 1e9;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s M K N\n", argv[0]);
    return 2;
  }
  const int m = std::atoi(argv[1]), k = std::atoi(argv[2]), n = std::atoi(argv[3]);
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::desc a_md({m, k}, dt::f32, tag::ab), b_plain({k, n}, dt::f32, tag::ab),
      c_md({m, n}, dt::f32, tag::ab);
  matmul::primitive_desc pd(matmul::desc(a_md, memory::desc({k, n}, dt::f32, tag::any), c_md), eng);
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  memory am(a_md, eng, a.data()), b0(b_plain, eng, b.data()), cm(c_md, eng, c.data());
  memory bm(pd.weights_desc(), eng);
  reorder(b0, bm).execute(s, b0, bm);
  matmul mm(pd);
  std::vector<double> times;
  for (int r = 0; r < 50; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    s.wait();
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  std::printf("%s %d x %d x %d: %.1f GFLOP/s; FMA-only loop %.1f GFLOP/s\n", pd.impl_info_str(), m,
              k, n, 2.0 * m * k * n / times[25] / 1e9, fma_peak_gflops());
}
