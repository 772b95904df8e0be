// The kernel source itself, compiled for the host emulation (see backends/gpu/vendor.hpp here);
// its products run on the emulated GEMM (emu_gemm.cpp).
#include "backends/gpu/kernels/lstm.hip"
