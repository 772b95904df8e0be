#pragma once
// Hopper's warpgroup matrix instructions (wgmma, sm_90a) for Kiln's own GEMM's NVIDIA float16
// tiles (gemm_f16_wgmma.cu): a warpgroup of 4 warps multiplies a 64 x 16 slice of A by a 16 x N
// slice of B, both read by the tensor cores straight from shared memory through matrix
// descriptors, accumulating 64 x N float32 in the warpgroup's registers. mma.sync, which the
// portable tiles (mma_tile.hpp) use, reaches about half of Hopper's matrix rate; these reach
// the rest. No AMD instruction works this way (MFMA reads registers, as mma.sync does), so this
// header is NVIDIA's alone and built for sm_90a only (KILN_WGMMA).
//
// Accumulator layout (PTX ISA, wgmma D fragments): warp w of the warpgroup holds rows 16 w ..
// 16 w + 15; in each block of 8 columns j, lane l holds d[4 j + 0, 1] at row 16 w + l / 4,
// columns 8 j + 2 (l % 4) + {0, 1}, and d[4 j + 2, 3] eight rows further.
#include <cstdint>

#include "backends/gpu/kernels/device_common.hpp"
#include "backends/gpu/vendor.hpp"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_WGMMA 1
#endif

namespace kiln::backends::gpu::kernels::wgmma {

#if defined(KILN_WGMMA)

// A shared-memory matrix descriptor for the 128-byte swizzle: the 16-byte chunk c of row r of
// every 8-row, 128-byte-row group lies at chunk c ^ (r % 8), groups 1024-byte aligned (what
// SwizzledTile<uint16_t, R, 64> lays out). lbo / sbo in bytes: for k-major operands sbo is the
// distance between 8-row groups (lbo unused); for n-major ones lbo is the distance between
// 64-column panels and sbo between groups of 8 k rows.
__device__ inline uint64_t descriptor(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t{(addr & 0x3FFFFu) >> 4} | uint64_t{(lbo >> 4) & 0x3FFFu} << 16 |
         uint64_t{(sbo >> 4) & 0x3FFFu} << 32 | uint64_t{1} << 62;
}

// Orders this warpgroup's earlier register and shared-memory accesses before the wgmma that
// follow (needed before the first one and whenever the accumulators were touched).
__device__ inline void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ inline void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (cp.async, plain stores) made visible to the
// tensor cores' reads (the async proxy).
__device__ inline void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Shared-memory barriers with a transaction phase (mbarrier): a producer's arrivals complete a
// phase that consumers wait for by its parity (0, 1, 0, ... as phases complete).
__device__ inline uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void barrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals)
               : "memory");
}
// One arrival, with release semantics: this thread's earlier writes are seen by whoever waits.
__device__ inline void barrier_arrive(uint64_t* bar) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(smem_address(bar))
      : "memory");
}
// Waits (acquire) until the phase of the given parity has completed.
__device__ inline void barrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred ready;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
        "selp.u32 %0, 1, 0, ready;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// One arrival that also tells the barrier to expect `bytes` more of asynchronous copies (the
// phase completes when both the arrivals and the bytes are in).
__device__ inline void barrier_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(smem_address(bar)),
      "r"(bytes)
      : "memory");
}
// Barrier initializations made visible to the asynchronous proxy (the bulk copies complete
// transactions on them) before anyone uses them.
__device__ inline void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// A bulk tensor copy (TMA) of the box at coordinates {c0, c1, c2} of the tensor `map` describes
// into shared memory at `dst` (laid out as the map's swizzle says), completing its bytes on
// `bar`. `map`: the address of a __grid_constant__ kernel parameter (a CUtensorMap).
__device__ inline void bulk_tensor_3d(void* dst, const void* map, int c0, int c1, int c2,
                                      uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_address(bar))
      : "memory");
}
// A bulk tensor copy in im2col mode (the implicit convolution's A) of the channels-last 4-d
// tensor `map` describes: the box's pixels are output positions, walked from the input position
// {w, h} of image n (the first pixel's window corner) along the map's traversal strides,
// through rows and images; each pixel brings the map's channels from channel c of the filter tap
// at offsets {off_w, off_h} into its window. Positions outside the map's bounding box (the
// padding) arrive as zeros.
__device__ inline void bulk_im2col_4d(void* dst, const void* map, int c, int w, int h, int n,
                                      uint16_t off_w, uint16_t off_h, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(smem_address(bar)),
      "h"(off_w), "h"(off_h)
      : "memory");
}
// Hands registers between warpgroups (every warp of the warpgroup executes it): the copying
// warpgroup gives its registers up to Regs a thread, the multiplying ones take up to Regs.
template <int Regs>
__device__ inline void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
template <int Regs>
__device__ inline void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
// Named block barriers (0 is __syncthreads'): `threads` of the block, a multiple of 32, meet.
__device__ inline void sync_named(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across the asynchronous region.
template <int N>
__device__ inline void pin(float (&d)[N]) {
  KILN_UNROLL
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x 64] += A[64 x 16] B[16 x 64] for the warpgroup; B k-major (TransB 0) or n-major (1).
template <int TransB>
__device__ inline void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                       int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31"
      "}, %32, %33, p, 1, 1, 0, %35;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB));
}

// D[64 x 128] += A[64 x 16] B[16 x 128] for the warpgroup; B k-major (TransB 0) or n-major (1).
template <int TransB>
__device__ inline void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                        int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, %67;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB));
}

// D[64 x 256] += A[64 x 16] B[16 x 256] for the warpgroup; B k-major (TransB 0) or n-major (1).
template <int TransB>
__device__ inline void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                        int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
      "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, "
      "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
      "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
      "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "
      "%122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, %131;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB));
}

// D[64 x N] += A B for the tile widths the GEMM uses.
template <int N, int TransB>
__device__ inline void mma(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (N == 64) {
    wgmma_m64n64k16<TransB>(d, desc_a, desc_b, 1);
  } else if constexpr (N == 128) {
    wgmma_m64n128k16<TransB>(d, desc_a, desc_b, 1);
  } else {
    static_assert(N == 256);
    wgmma_m64n256k16<TransB>(d, desc_a, desc_b, 1);
  }
}

#endif  // KILN_WGMMA

}  // namespace kiln::backends::gpu::kernels::wgmma
