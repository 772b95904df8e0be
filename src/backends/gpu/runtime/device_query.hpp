#pragma once
// What the runtime says about a device, and which vendor libraries this process can load.
#include "backends/gpu/gpu_backend.hpp"

namespace kiln::backends::gpu {

// Devices the runtime sees; Unavailable naming the cause ("no CUDA driver", "no device") when
// there is none to use.
int device_count();

GpuDeviceInfo query_device(int index);

// cuBLASLt and cuDNN on NVIDIA; rocBLAS, hipBLASLt and MIOpen on AMD: loaded with dlopen to
// read their versions, so that a missing one is reported, not fatal.
std::vector<GpuLibraryVersion> vendor_library_versions();

}  // namespace kiln::backends::gpu
