// The matrix-tile attention kernel's source, compiled for the host emulation with the matrix
// instructions emulated from their lane layouts (as emu_gemm.cpp): mma.sync for 32-lane
// wavefronts, MFMA for 64-lane ones.
#define KILN_EMU_MMA 1
#include "backends/gpu/kernels/attention_tiles.hip"
