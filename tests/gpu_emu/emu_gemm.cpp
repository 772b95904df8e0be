// The kernel sources themselves, compiled for the host emulation (see backends/gpu/vendor.hpp
// here), with the matrix instructions and ldmatrix emulated from their lane layouts
// (mma_tile.hpp, tile_copy.hpp): NVIDIA's mma.sync m16n8k16 for 32-lane wavefronts, AMD's MFMA
// 16x16x16 for 64-lane ones.
#define KILN_EMU_MMA 1
#include "backends/gpu/kernels/gemm.hip"
#include "backends/gpu/kernels/gemm_f16.hip"
#include "backends/gpu/kernels/gemm_f16_fma.hip"
#include "backends/gpu/kernels/gemm_f32.hip"
