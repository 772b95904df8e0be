#include "backends/backend_registry.hpp"

#include <algorithm>
#include <charconv>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/gpu/loader.hpp"
#include "core/error.hpp"

namespace kiln::backends {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry;
    r->add(kCpuBackendName, [] { return &CpuBackend::instance(); });
    // The GPU library loads only when a GPU is asked for; where there is none, the loader's
    // reason ("no GPU backend library found", "no CUDA driver", ...) is the error.
    // Each further GPU is a backend of its own (its streams, arena and libraries' handles bound
    // to that device), opened the first time an instance group names it.
    r->add(
        "gpu",
        []() -> Backend* {
          static std::unique_ptr<GpuBackend> gpu = load_gpu_backend();
          return gpu.get();
        },
        {"cuda", "hip"},
        [](int index) -> Backend* {
          static std::map<int, std::unique_ptr<GpuBackend>> gpus;  // under the registry's lock
          GpuLoadOptions options;
          options.device = index;
          std::unique_ptr<GpuBackend>& gpu = gpus[index];
          if (!gpu) gpu = load_gpu_backend(options);
          return gpu.get();
        });
    return r;
  }();
  return *registry;
}

void BackendRegistry::add(std::string device, Opener open, std::vector<std::string> aliases,
                          IndexedOpener open_index) {
  std::lock_guard<std::mutex> lock(mutex_);
  KILN_CHECK(!find(device), ErrorCode::Internal, "backend '{}' registered twice", device);
  entries_.push_back(
      {std::move(device), std::move(aliases), std::move(open), std::move(open_index), {}});
}

BackendRegistry::Entry* BackendRegistry::find(std::string_view device) {
  for (Entry& e : entries_) {
    if (e.device == device ||
        std::find(e.aliases.begin(), e.aliases.end(), device) != e.aliases.end()) {
      return &e;
    }
  }
  return nullptr;
}

namespace {

// "gpu:3" -> ("gpu", 3); a name without a colon is unit 0. The index is a decimal count.
std::pair<std::string_view, int> split_unit(std::string_view device) {
  const size_t colon = device.rfind(':');
  if (colon == std::string_view::npos) return {device, 0};
  std::string_view digits = device.substr(colon + 1);
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  KILN_CHECK_ARG(!digits.empty() && ec == std::errc{} && end == digits.data() + digits.size() &&
                     index >= 0,
                 "device '{}': the part after ':' must be a unit number (as in 'gpu:0')", device);
  return {device.substr(0, colon), index};
}

}  // namespace

Backend& BackendRegistry::get(std::string_view device) {
  const auto [name, index] = split_unit(device);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* e = find(name);
  if (!e) {
    std::string known;
    for (const Entry& k : entries_) known += (known.empty() ? "" : ", ") + k.device;
    fail(ErrorCode::Unsupported, "unknown device '{}': this build knows {}", device, known);
  }
  KILN_CHECK(index == 0 || e->open_index, ErrorCode::Unsupported,
             "device '{}': '{}' has one unit only ('{}:0')", device, e->device, e->device);
  Opened& unit = e->units[index];
  if (unit.backend) return *unit.backend;
  KILN_CHECK(unit.failure.empty(), ErrorCode::Unavailable, "device '{}' is not available: {}",
             device, unit.failure);
  try {
    unit.backend = index == 0 ? e->open() : e->open_index(index);
  } catch (const Error& err) {
    unit.failure = err.message();
  } catch (const std::exception& err) {
    unit.failure = err.what();
  }
  if (!unit.backend && unit.failure.empty()) unit.failure = "its backend did not open";
  KILN_CHECK(unit.backend, ErrorCode::Unavailable, "device '{}' is not available: {}", device,
             unit.failure);
  return *unit.backend;
}

std::vector<std::string> BackendRegistry::devices() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.device);
  return out;
}

std::vector<Backend*> backends_for(std::string_view devices) {
  std::vector<Backend*> out;
  size_t at = 0;
  while (at <= devices.size()) {
    size_t comma = devices.find(',', at);
    if (comma == std::string_view::npos) comma = devices.size();
    std::string_view name = devices.substr(at, comma - at);
    KILN_CHECK_ARG(!name.empty(), "device list '{}' has an empty name", devices);
    Backend* b = &BackendRegistry::instance().get(name);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    at = comma + 1;
  }
  Backend* cpu = &CpuBackend::instance();
  if (std::find(out.begin(), out.end(), cpu) == out.end()) out.push_back(cpu);
  return out;
}

}  // namespace kiln::backends
