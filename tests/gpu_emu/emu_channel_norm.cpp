// The kernel source itself, compiled for the host emulation (see backends/gpu/vendor.hpp here).
#include "backends/gpu/kernels/channel_norm.hip"
