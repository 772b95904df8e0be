#pragma once
// The copies a tiled kernel (gemm.hip) makes between memories, behind one small interface so the
// kernel is written once for every target:
//
//   copy_async_16(smem, global)    16 bytes global -> shared; NVIDIA: cp.async (sm_80+), which
//                                  lands while the block computes; elsewhere a plain load and
//                                  store (AMD has no asynchronous copy into LDS in HIP 5.2)
//   copy_async_commit()            closes the group of copies issued since the last commit
//   copy_async_wait<N>()           waits until at most N groups are still in flight
//   copy_16(dst, src)              16 bytes with one load and one store (any memory)
//   prefetch_l2(global)            asks L2 for the line holding `global` (NVIDIA sm_80+;
//                                  nothing elsewhere)
//   ldmatrix_x4 / _x2 <Trans>      NVIDIA's ldmatrix: the warp's lanes name 8-element rows of
//                                  8 x 8 matrices of 16-bit values in shared memory, each lane
//                                  receives its fragment of each matrix (transposed with Trans)
//
// ldmatrix exists only on NVIDIA (sm_75+); only the NVIDIA matrix tile (mma_tile.hpp) calls it.
// The host emulation (KILN_EMU_MMA, tests/gpu_emu) computes ldmatrix from the PTX ISA's
// description with the wavefront's gathered addresses, so a wrong address pattern fails the CPU
// tests, and takes the plain copies for cp.async.
#include <cstdint>

#if !defined(__CUDACC__) && !defined(__HIP__)
#include <cstring>
#endif

#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu::kernels {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KILN_CP_ASYNC 1
#endif

struct alignas(16) Bytes16 {
  uint32_t w[4];
};

__device__ inline void copy_16(void* dst, const void* src) {
#if defined(__CUDACC__) || defined(__HIP__)
  *static_cast<Bytes16*>(dst) = *static_cast<const Bytes16*>(src);
#else
  std::memcpy(dst, src, 16);
#endif
}
__device__ inline void copy_16(void* dst, const Bytes16& v) {
  copy_16(dst, static_cast<const void*>(&v));
}

__device__ inline void prefetch_l2(const void* global) {
#if defined(KILN_CP_ASYNC)
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(global));
#else
  (void)global;
#endif
}

__device__ inline void copy_async_16(void* smem, const void* global) {
#if defined(KILN_CP_ASYNC)
  // .cg: through L2 only; each operand tile is read once per block, L1 would only be polluted.
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global));
#else
  copy_16(smem, global);
#endif
}

__device__ inline void copy_async_commit() {
#if defined(KILN_CP_ASYNC)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ inline void copy_async_wait() {
#if defined(KILN_CP_ASYNC)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#if defined(KILN_EMU_MMA)
// ldmatrix on the host: lane 8i + j names row j of matrix i. Without Trans lane l receives
// elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of each matrix; with Trans elements
// (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4), the low half first.
template <int N, bool Trans>
__device__ inline void emulate_ldmatrix(uint32_t (&r)[N], const uint16_t* row) {
  const uint16_t* rows[KILN_WARP_SIZE];
  kiln_emu::wave_gather(row, rows);
  const int lane = static_cast<int>(threadIdx.x % KILN_WARP_SIZE);
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < N; ++i) {
    const uint16_t lo = Trans ? rows[8 * i + 2 * t][g] : rows[8 * i + g][2 * t];
    const uint16_t hi = Trans ? rows[8 * i + 2 * t + 1][g] : rows[8 * i + g][2 * t + 1];
    r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
}
#endif

// `row`: this lane's row of 8 16-bit elements (16-byte aligned, shared memory). x4: lanes 8i..8i+7
// name matrix i's rows; x2: lanes 0..15 (the others' addresses are not read, but must be valid).
template <bool Trans>
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#if defined(KILN_EMU_MMA)
  emulate_ldmatrix<4, Trans>(r, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
#else
  // Another pass (the host's, AMD's): never called there.
  (void)row;
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

template <bool Trans>
__device__ inline void ldmatrix_x2(uint32_t (&r)[2], const uint16_t* row) {
#if defined(KILN_EMU_MMA)
  emulate_ldmatrix<2, Trans>(r, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
  }
#else
  (void)row;
  r[0] = r[1] = 0;
#endif
}

}  // namespace kiln::backends::gpu::kernels
