#pragma once
// Copy bandwidth of a GPU through the backend interface itself (its streams, staging and
// events), so that what it measures is what the executor's planned copies get.
#include <cstddef>
#include <string>
#include <vector>

#include "backends/gpu/gpu_backend.hpp"

namespace kiln::backends {

struct CopyBandwidth {
  std::string kind;   // "host->device pinned", ...
  std::string timer;  // "device events" or "host clock"
  size_t bytes = 0;
  double median_ms = 0;
  double gb_per_s = 0;  // bytes / median time, 1e9 bytes per GB
};

// Times each copy kind `repeats` times (after one warm-up) with device events on the backend's
// copy stream: host->device and device->host from pinned and from pageable host memory, and
// device->device. Each copy moves `bytes`.
std::vector<CopyBandwidth> measure_copy_bandwidth(GpuBackend& gpu, size_t bytes, int repeats);

}  // namespace kiln::backends
