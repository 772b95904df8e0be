#pragma once
// GPU readings for the metrics endpoint, under Triton's names and labels (nv_gpu_utilization,
// nv_gpu_memory_total_bytes, nv_gpu_memory_used_bytes, nv_gpu_power_usage, nv_gpu_power_limit,
// nv_energy_consumption; label gpu_uuid), so dashboards written for Triton read Kiln's. Read at
// each scrape through NVML on NVIDIA (libnvidia-ml.so.1, which the driver installs) or ROCm SMI
// on AMD (librocm_smi64.so), each opened at run time: a machine with neither publishes no GPU
// families, and says why once.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::server {

struct GpuReading {
  std::string uuid;                   // "GPU-8c3f..." (NVML) or the unique id in hex (ROCm SMI)
  std::optional<double> utilization;  // [0, 1], over the driver's last sample period
  std::optional<uint64_t> memory_total_bytes;  // device memory
  std::optional<uint64_t> memory_used_bytes;
  std::optional<double> power_watts;        // drawn now
  std::optional<double> power_limit_watts;  // the power management limit
  std::optional<double> energy_joules;      // since the monitor was opened (the server started)
};

class GpuMonitor {
 public:
  // The process's monitor, opened at its first use (the server opens it at start).
  static GpuMonitor& instance();
  // Which library serves it ("NVML", "ROCm SMI"), or "" when none could be opened.
  const std::string& library() const { return library_; }
  // Why there is none (the loader's message), when library() is "".
  const std::string& unavailable_reason() const { return why_; }
  // One reading per GPU; a value the device does not report is absent. Thread-safe.
  std::vector<GpuReading> read();

  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;
  ~GpuMonitor();

 private:
  GpuMonitor();
  struct Impl;
  Impl* impl_ = nullptr;
  std::string library_, why_;
};

// The readings in Prometheus text (HELP and TYPE lines, then one sample per GPU and value).
std::string render_gpu_metrics(const std::vector<GpuReading>& readings);

}  // namespace kiln::server
