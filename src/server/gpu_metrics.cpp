#include "server/gpu_metrics.hpp"

#include <fmt/format.h>

#include <cinttypes>
#include <functional>
#include <mutex>

#include "core/log.hpp"
#include "core/vendor_library.hpp"

namespace kiln::server {
namespace {

// NVML's C interface, as its documentation gives it (the header is not in Debian's CUDA
// packages): every call returns 0 on success.
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu, memory;  // percent over the last sample period
};
struct NvmlMemory {
  unsigned long long total, free, used;  // bytes
};
struct NvmlApi {
  int (*init)() = nullptr;  // nvmlInit_v2
  const char* (*error_string)(int) = nullptr;
  int (*count)(unsigned int*) = nullptr;               // nvmlDeviceGetCount_v2
  int (*handle)(unsigned int, NvmlDevice*) = nullptr;  // nvmlDeviceGetHandleByIndex_v2
  int (*uuid)(NvmlDevice, char*, unsigned int) = nullptr;
  int (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  int (*power)(NvmlDevice, unsigned int*) = nullptr;         // milliwatts
  int (*power_limit)(NvmlDevice, unsigned int*) = nullptr;   // milliwatts
  int (*energy)(NvmlDevice, unsigned long long*) = nullptr;  // millijoules since driver load
};

// ROCm SMI's C interface (rocm_smi.h of ROCm 5.2): every call returns 0 on success.
constexpr int kRsmiVram = 0;  // RSMI_MEM_TYPE_VRAM
struct RsmiApi {
  int (*init)(uint64_t) = nullptr;
  int (*count)(uint32_t*) = nullptr;  // rsmi_num_monitor_devices
  int (*unique_id)(uint32_t, uint64_t*) = nullptr;
  int (*busy_percent)(uint32_t, uint32_t*) = nullptr;
  int (*memory_total)(uint32_t, int, uint64_t*) = nullptr;
  int (*memory_used)(uint32_t, int, uint64_t*) = nullptr;
  int (*power)(uint32_t, uint32_t, uint64_t*) = nullptr;            // rsmi_dev_power_ave_get, uW
  int (*power_cap)(uint32_t, uint32_t, uint64_t*) = nullptr;        // uW
  int (*energy)(uint32_t, uint64_t*, float*, uint64_t*) = nullptr;  // counter, its resolution (uJ)
};

template <typename T, typename Fn>
std::optional<T> ask(Fn&& fn) {
  T value{};
  if (fn(value)) return value;
  return std::nullopt;
}

}  // namespace

struct GpuMonitor::Impl {
  std::mutex mutex;
  // The energy counters when the monitor opened: nv_energy_consumption counts from there, as
  // Triton's counts from its start.
  std::vector<std::optional<double>> energy_at_open;
  std::function<std::vector<GpuReading>()> read;
};

GpuMonitor& GpuMonitor::instance() {
  static GpuMonitor monitor;
  return monitor;
}

GpuMonitor::GpuMonitor() : impl_(new Impl) {
  static VendorLibrary nvml_lib("libnvidia-ml.so.1", "NVML");
  static NvmlApi nvml;
  nvml_lib.get(nvml.init, "nvmlInit_v2");
  nvml_lib.get(nvml.error_string, "nvmlErrorString");
  nvml_lib.get(nvml.count, "nvmlDeviceGetCount_v2");
  nvml_lib.get(nvml.handle, "nvmlDeviceGetHandleByIndex_v2");
  nvml_lib.get(nvml.uuid, "nvmlDeviceGetUUID");
  nvml_lib.get(nvml.utilization, "nvmlDeviceGetUtilizationRates");
  nvml_lib.get(nvml.memory, "nvmlDeviceGetMemoryInfo");
  nvml_lib.get(nvml.power, "nvmlDeviceGetPowerUsage");
  nvml_lib.get(nvml.power_limit, "nvmlDeviceGetPowerManagementLimit");
  nvml_lib.get(nvml.energy, "nvmlDeviceGetTotalEnergyConsumption");
  std::string nvml_why = nvml_lib.error();
  if (nvml_lib.ok()) {
    const int rc = nvml.init();
    if (rc == 0) {
      library_ = "NVML";
      impl_->read = [] {
        std::vector<GpuReading> out;
        unsigned int n = 0;
        if (nvml.count(&n) != 0) return out;
        for (unsigned int i = 0; i < n; ++i) {
          NvmlDevice d = nullptr;
          if (nvml.handle(i, &d) != 0) continue;
          GpuReading r;
          char uuid[96] = {};
          r.uuid = nvml.uuid(d, uuid, sizeof uuid) == 0 ? uuid : fmt::format("gpu{}", i);
          if (auto u = ask<NvmlUtilization>([&](auto& v) { return nvml.utilization(d, &v) == 0; }))
            r.utilization = u->gpu / 100.0;
          if (auto m = ask<NvmlMemory>([&](auto& v) { return nvml.memory(d, &v) == 0; })) {
            r.memory_total_bytes = m->total;
            r.memory_used_bytes = m->used;
          }
          if (auto p = ask<unsigned int>([&](auto& v) { return nvml.power(d, &v) == 0; }))
            r.power_watts = *p / 1000.0;
          if (auto p = ask<unsigned int>([&](auto& v) { return nvml.power_limit(d, &v) == 0; }))
            r.power_limit_watts = *p / 1000.0;
          if (auto e = ask<unsigned long long>([&](auto& v) { return nvml.energy(d, &v) == 0; }))
            r.energy_joules = static_cast<double>(*e) / 1000.0;
          out.push_back(std::move(r));
        }
        return out;
      };
    } else {
      nvml_why = fmt::format("NVML did not start: {}", nvml.error_string(rc));
    }
  }
  if (library_.empty()) {
    static VendorLibrary rsmi_lib("librocm_smi64.so", "ROCm SMI");
    static RsmiApi rsmi;
    rsmi_lib.get(rsmi.init, "rsmi_init");
    rsmi_lib.get(rsmi.count, "rsmi_num_monitor_devices");
    rsmi_lib.get(rsmi.unique_id, "rsmi_dev_unique_id_get");
    rsmi_lib.get(rsmi.busy_percent, "rsmi_dev_busy_percent_get");
    rsmi_lib.get(rsmi.memory_total, "rsmi_dev_memory_total_get");
    rsmi_lib.get(rsmi.memory_used, "rsmi_dev_memory_usage_get");
    rsmi_lib.get(rsmi.power, "rsmi_dev_power_ave_get");
    rsmi_lib.get(rsmi.power_cap, "rsmi_dev_power_cap_get");
    rsmi_lib.get(rsmi.energy, "rsmi_dev_energy_count_get");
    if (rsmi_lib.ok() && rsmi.init(0) == 0) {
      library_ = "ROCm SMI";
      impl_->read = [] {
        std::vector<GpuReading> out;
        uint32_t n = 0;
        if (rsmi.count(&n) != 0) return out;
        for (uint32_t i = 0; i < n; ++i) {
          GpuReading r;
          uint64_t id = 0;
          r.uuid =
              rsmi.unique_id(i, &id) == 0 ? fmt::format("{:016x}", id) : fmt::format("gpu{}", i);
          if (auto b = ask<uint32_t>([&](auto& v) { return rsmi.busy_percent(i, &v) == 0; }))
            r.utilization = *b / 100.0;
          r.memory_total_bytes =
              ask<uint64_t>([&](auto& v) { return rsmi.memory_total(i, kRsmiVram, &v) == 0; });
          r.memory_used_bytes =
              ask<uint64_t>([&](auto& v) { return rsmi.memory_used(i, kRsmiVram, &v) == 0; });
          if (auto p = ask<uint64_t>([&](auto& v) { return rsmi.power(i, 0, &v) == 0; }))
            r.power_watts = static_cast<double>(*p) / 1e6;
          if (auto p = ask<uint64_t>([&](auto& v) { return rsmi.power_cap(i, 0, &v) == 0; }))
            r.power_limit_watts = static_cast<double>(*p) / 1e6;
          uint64_t counter = 0, stamp = 0;
          float resolution = 0;
          if (rsmi.energy(i, &counter, &resolution, &stamp) == 0)
            r.energy_joules = static_cast<double>(counter) * resolution / 1e6;
          out.push_back(std::move(r));
        }
        return out;
      };
    } else {
      why_ = fmt::format("{}; {}", nvml_why,
                         rsmi_lib.ok() ? "ROCm SMI did not start" : rsmi_lib.error());
    }
  }
  if (!library_.empty()) {
    for (const GpuReading& r : impl_->read()) impl_->energy_at_open.push_back(r.energy_joules);
  }
}

GpuMonitor::~GpuMonitor() {
  delete impl_;
}

std::vector<GpuReading> GpuMonitor::read() {
  if (library_.empty()) return {};
  std::lock_guard lock(impl_->mutex);
  std::vector<GpuReading> out = impl_->read();
  for (size_t i = 0; i < out.size(); ++i) {
    const std::optional<double> at_open =
        i < impl_->energy_at_open.size() ? impl_->energy_at_open[i] : std::nullopt;
    if (out[i].energy_joules && at_open) *out[i].energy_joules -= *at_open;
  }
  return out;
}

std::string render_gpu_metrics(const std::vector<GpuReading>& readings) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value_of) {
    bool any = false;
    for (const GpuReading& r : readings) any |= value_of(r).has_value();
    if (!any) return;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const GpuReading& r : readings) {
      if (auto v = value_of(r)) out += fmt::format("{}{{gpu_uuid=\"{}\"}} {}\n", name, r.uuid, *v);
    }
  };
  family("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)",
         [](const GpuReading& r) { return r.utilization; });
  family("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes",
         [](const GpuReading& r) { return r.memory_total_bytes; });
  family("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes",
         [](const GpuReading& r) { return r.memory_used_bytes; });
  family("nv_gpu_power_usage", "gauge", "GPU power usage in watts",
         [](const GpuReading& r) { return r.power_watts; });
  family("nv_gpu_power_limit", "gauge", "GPU power management limit in watts",
         [](const GpuReading& r) { return r.power_limit_watts; });
  family("nv_energy_consumption", "counter",
         "GPU energy consumption in joules since the server started",
         [](const GpuReading& r) { return r.energy_joules; });
  return out;
}

}  // namespace kiln::server
