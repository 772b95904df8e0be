#include "backends/backend_registry.hpp"

#include <algorithm>

#include "backends/cpu/cpu_backend.hpp"
#include "core/error.hpp"

namespace kiln::backends {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry;
    r->add(kCpuBackendName, [] { return &CpuBackend::instance(); });
    return r;
  }();
  return *registry;
}

void BackendRegistry::add(std::string device, Opener open, std::vector<std::string> aliases) {
  std::lock_guard<std::mutex> lock(mutex_);
  KILN_CHECK(!find(device), ErrorCode::Internal, "backend '{}' registered twice", device);
  entries_.push_back({std::move(device), std::move(aliases), std::move(open), nullptr, {}});
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

Backend& BackendRegistry::get(std::string_view device) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* e = find(device);
  if (!e) {
    std::string known;
    for (const Entry& k : entries_) known += (known.empty() ? "" : ", ") + k.device;
    fail(ErrorCode::Unsupported, "unknown device '{}': this build knows {}", device, known);
  }
  if (e->backend) return *e->backend;
  KILN_CHECK(e->failure.empty(), ErrorCode::Unavailable, "device '{}' is not available: {}", device,
             e->failure);
  try {
    e->backend = e->open();
  } catch (const Error& err) {
    e->failure = err.message();
  } catch (const std::exception& err) {
    e->failure = err.what();
  }
  if (!e->backend && e->failure.empty()) e->failure = "its backend did not open";
  KILN_CHECK(e->backend, ErrorCode::Unavailable, "device '{}' is not available: {}", device,
             e->failure);
  return *e->backend;
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
