#include "backends/gpu/loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"

namespace kiln::backends {
namespace fs = std::filesystem;
namespace {

std::string gib(uint64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Opens one library and, when it is a Kiln GPU library of this build, the device. Fills
// `attempt.problem` otherwise.
std::unique_ptr<GpuBackend> try_library(const std::string& path, int device,
                                        GpuLibraryAttempt& attempt) {
  attempt.path = path;
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    attempt.problem = fmt::format("cannot be loaded: {}", why ? why : "dlopen failed");
    return nullptr;
  }
  auto abi = reinterpret_cast<KilnGpuAbiVersionFn>(dlsym(handle, "kiln_gpu_abi_version"));
  auto version = reinterpret_cast<KilnGpuKilnVersionFn>(dlsym(handle, "kiln_gpu_kiln_version"));
  auto open = reinterpret_cast<KilnGpuOpenFn>(dlsym(handle, "kiln_gpu_open"));
  if (!abi || !version || !open) {
    attempt.problem = "is not a Kiln GPU library (no kiln_gpu_open)";
    return nullptr;
  }
  if (abi() != kGpuBackendAbiVersion || std::strcmp(version(), KILN_VERSION) != 0) {
    attempt.problem =
        fmt::format("was built for Kiln {} (GPU ABI {}), this is Kiln {} (GPU ABI {})", version(),
                    abi(), KILN_VERSION, kGpuBackendAbiVersion);
    return nullptr;
  }
  KilnGpuOpenError error{};
  std::unique_ptr<GpuBackend> backend(open(device, &error));
  if (!backend) attempt.problem = error.message[0] ? error.message : "opening the device failed";
  return backend;
}

// The file of the module that holds this function: the program, or libkiln.so / the Python
// module when Kiln is linked into one.
fs::path this_module() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&this_module), &info) && info.dli_fname && info.dli_fname[0]) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::path(info.dli_fname), ec);
    if (!ec) return p;
  }
  return {};
}

}  // namespace

const std::vector<std::string>& gpu_library_names() {
  static const std::vector<std::string> names = {"libkiln_gpu_cuda.so", "libkiln_gpu_hip.so"};
  return names;
}

std::vector<std::string> gpu_library_dirs() {
  std::vector<fs::path> bases;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) bases.push_back(exe.parent_path());
  fs::path module = this_module();
  if (!module.empty()) bases.push_back(module.parent_path());
  std::vector<std::string> dirs;
  for (const fs::path& base : bases) {
    for (const fs::path& d : {base, (base / ".." / "lib").lexically_normal()}) {
      std::string s = d.string();
      bool seen = false;
      for (const std::string& x : dirs) seen = seen || x == s;
      if (!seen) dirs.push_back(s);
    }
  }
  return dirs;
}

GpuProbe probe_gpu_backend(const GpuLoadOptions& options) {
  GpuProbe probe;
  std::vector<std::string> candidates;
  std::string explicit_library = options.library;
  const char* env = std::getenv("KILN_GPU_BACKEND");
  if (explicit_library.empty() && env && env[0]) explicit_library = env;
  if (!explicit_library.empty()) {
    std::error_code ec;
    if (!fs::exists(explicit_library, ec)) {
      probe.reason = fmt::format(
          "GPU backend library {} (KILN_GPU_BACKEND or --gpu-library) "
          "does not exist",
          explicit_library);
      return probe;
    }
    candidates.push_back(explicit_library);
  } else {
    std::vector<std::string> dirs = gpu_library_dirs();
    for (const std::string& name : gpu_library_names()) {
      bool found = false;
      for (const std::string& dir : dirs) {
        std::error_code ec;
        fs::path p = fs::path(dir) / name;
        if (fs::exists(p, ec)) {
          candidates.push_back(p.string());
          found = true;
          break;
        }
      }
      // Not beside Kiln: the dynamic linker's search path may still have it (an install that
      // put it in a system directory, LD_LIBRARY_PATH).
      if (!found) {
        void* h = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
        if (!h) h = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL);
        if (h) candidates.push_back(name);
      }
    }
    if (candidates.empty()) {
      probe.reason = fmt::format(
          "no GPU backend library found ({} in {} or the dynamic linker's path; this build of "
          "Kiln may have none: see docs/GPU.md)",
          join(gpu_library_names(), ", "), join(dirs, ", "));
      return probe;
    }
  }
  std::vector<std::string> problems;
  for (const std::string& path : candidates) {
    GpuLibraryAttempt attempt;
    std::unique_ptr<GpuBackend> backend = try_library(path, options.device, attempt);
    probe.attempts.push_back(attempt);
    if (backend) {
      probe.backend = std::move(backend);
      probe.library = path;
      return probe;
    }
    problems.push_back(fmt::format("{}: {}", fs::path(path).filename().string(), attempt.problem));
  }
  probe.reason = "no GPU available: " + join(problems, "; ");
  return probe;
}

std::unique_ptr<GpuBackend> load_gpu_backend(const GpuLoadOptions& options) {
  GpuProbe probe = probe_gpu_backend(options);
  if (!probe.backend) throw Error(ErrorCode::Unavailable, probe.reason);
  return std::move(probe.backend);
}

std::string describe_gpu_device(const GpuDeviceInfo& info, const std::string& indent) {
  std::string out;
  auto line = [&](const char* key, const std::string& value) {
    out += fmt::format("{}{}: {}\n", indent, key, value);
  };
  line("target", info.target.to_string());
  line("memory", fmt::format("{} total, {} free", gib(info.total_memory), gib(info.free_memory)));
  line("multiprocessors", fmt::format("{} (wavefront {}, clock {} MHz)", info.multiprocessors,
                                      info.wavefront_size, info.clock_mhz));
  line("matrix instructions", info.matrix_instructions.empty()
                                  ? "none (plain FMA)"
                                  : join(info.matrix_instructions, ", "));
  bool cuda = info.target.vendor == "cuda";
  line("runtime", fmt::format("{} {} (driver supports {})", cuda ? "CUDA" : "HIP",
                              info.runtime_version, info.driver_version));
  line("pci bus", info.pci_bus_id);
  line("compiled for", info.compiled_archs.empty() ? "none" : join(info.compiled_archs, ", "));
  for (const GpuLibraryVersion& lib : info.libraries) {
    line(lib.name.c_str(), lib.version.empty() ? "not found (" + lib.missing + ")" : lib.version);
  }
  return out;
}

}  // namespace kiln::backends
