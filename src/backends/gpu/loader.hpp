#pragma once
// Finds and opens the GPU backend library at run time, so that Kiln itself links no GPU runtime
// and runs where there is no GPU, driver or library: load_gpu_backend() then says why.
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu/gpu_backend.hpp"

namespace kiln::backends {

struct GpuLoadOptions {
  // A GPU library to use instead of searching; empty: $KILN_GPU_BACKEND, else the search.
  std::string library;
  int device = 0;
};

// One library the loader looked at and what came of it.
struct GpuLibraryAttempt {
  std::string path;
  std::string problem;  // empty when it opened the device
};

struct GpuProbe {
  std::unique_ptr<GpuBackend> backend;  // set when a device was opened
  std::string library;                  // the library that opened it
  std::string reason;                   // otherwise why not, one line
  std::vector<GpuLibraryAttempt> attempts;
};

// The GPU library names, in the order tried: NVIDIA's first, then AMD's.
const std::vector<std::string>& gpu_library_names();

// Directories searched for them: where the running program (or the library holding Kiln) is,
// and its ../lib; then the dynamic linker's own path (LD_LIBRARY_PATH, the system's).
std::vector<std::string> gpu_library_dirs();

// Never throws: a backend, or the reason there is none.
GpuProbe probe_gpu_backend(const GpuLoadOptions& options = {});

// The backend of the GPU, or Unavailable with the probe's reason ("no GPU backend library
// found ...", "... no CUDA driver ...", "... no device ..."). The library stays loaded for the
// rest of the process: the runtimes it pulls in do not support being unloaded.
std::unique_ptr<GpuBackend> load_gpu_backend(const GpuLoadOptions& options = {});

// `kiln devices`-style description of a device: "name: value" lines, indented by `indent`.
std::string describe_gpu_device(const GpuDeviceInfo& info, const std::string& indent = "  ");

}  // namespace kiln::backends
