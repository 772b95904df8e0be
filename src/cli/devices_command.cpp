// `kiln devices`: the devices Kiln can run on here. The CPU always; the GPU through the GPU
// backend library when one loads and opens a device, else the reason there is none (no library
// in this build, no driver, no device), so that "why does --device gpu fail" has one answer.
#include <cmath>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "backends/gpu/bandwidth.hpp"
#include "backends/gpu/gemm_bench.hpp"
#include "backends/gpu/loader.hpp"
#include "cli/command.hpp"
#include "cli/machine_info.hpp"

namespace kiln::cli {
namespace {

struct DevicesOptions {
  std::string gpu_library;
  bool bandwidth = false;
  size_t bandwidth_mib = 256;
  int repeats = 10;
  bool require_gpu = false;
  bool gemm = false;
  std::string gemm_only;  // shapes whose label contains this (all when empty)
  int gemm_runs = 10;
};

void print_bandwidth(backends::GpuBackend& gpu, const DevicesOptions& o) {
  auto results = backends::measure_copy_bandwidth(gpu, o.bandwidth_mib << 20, o.repeats);
  std::cout << fmt::format("  copy bandwidth ({} MiB, median of {}):\n", o.bandwidth_mib,
                           o.repeats);
  for (const auto& r : results) {
    std::cout << fmt::format("    {:<32} {:9.2f} GB/s  {:8.3f} ms  ({})\n", r.kind, r.gb_per_s,
                             r.median_ms, r.timer);
  }
}

// Kiln's own GEMM against cuBLASLt on ResNet-50's and BERT-base's GEMMs (fp16).
void print_gemms(backends::GpuBackend& gpu, const DevicesOptions& o) {
  std::vector<backends::GemmBenchShape> shapes;
  for (backends::GemmBenchShape& s : backends::model_gemm_shapes()) {
    if (s.label.find(o.gemm_only) != std::string::npos) shapes.push_back(std::move(s));
  }
  if (shapes.empty()) {
    std::cout << fmt::format("  own GEMM: no shape's label contains \"{}\"\n", o.gemm_only);
    return;
  }
  const auto rows = backends::measure_gemms(gpu, shapes, o.repeats, o.gemm_runs);
  std::cout << fmt::format(
      "  own GEMM (gpu.own.gemm) vs cuBLASLt (gpu.gemm), fp16, device events, median of {} "
      "rounds of {} runs:\n",
      o.repeats, o.gemm_runs);
  std::cout << fmt::format("    {:<40} {:>7} {:>5} {:>5} {:>9} {:>7} {:>9} {:>7} {:>8} {:>9}\n",
                           "shape", "M", "N", "K", "own ms", "TFLOP/s", "lib ms", "TFLOP/s",
                           "own/lib", "max diff");
  double log_sum = 0;
  int ratios = 0;
  for (const auto& r : rows) {
    const auto& s = r.shape;
    auto cell = [](const backends::GemmBenchKernel& k) {
      return k.error.empty() ? fmt::format("{:9.4f} {:7.1f}", k.median_ms, k.tflops)
                             : fmt::format("{:>9} {:>7}", "n/a", "");
    };
    std::string ratio = "", diff = "";
    if (r.own.error.empty() && r.library.error.empty()) {
      const double q = r.own.median_ms / r.library.median_ms;
      ratio = fmt::format("{:.2f}", q);
      diff = fmt::format("{:.1e}", r.max_rel_diff);
      log_sum += std::log(q);
      ++ratios;
    }
    std::cout << fmt::format("    {:<40} {:>7} {:>5} {:>5} {} {} {:>8} {:>9}\n", s.label, s.m, s.n,
                             s.k, cell(r.own), cell(r.library), ratio, diff);
  }
  for (const auto& r : rows) {
    if (!r.own.error.empty()) {
      std::cout << fmt::format("    {}: own GEMM: {}\n", r.shape.label, r.own.error);
    }
    if (!r.library.error.empty()) {
      std::cout << fmt::format("    {}: cuBLASLt: {}\n", r.shape.label, r.library.error);
      break;  // the same reason for every shape
    }
  }
  if (ratios > 0) {
    std::cout << fmt::format("    geometric mean own/lib over {} shapes: {:.2f}\n", ratios,
                             std::exp(log_sum / ratios));
  }
}

int devices(const DevicesOptions& o) {
  MachineInfo m = machine_info(0);
  std::cout << fmt::format("cpu: {} ({} CPUs available)\n", m.cpu, m.available_cpus);
  backends::GpuLoadOptions load;
  load.library = o.gpu_library;
  backends::GpuProbe probe = backends::probe_gpu_backend(load);
  if (!probe.backend) {
    std::cout << "gpu: " << probe.reason << "\n";
    return o.require_gpu ? kExitFailure : kExitOk;
  }
  const backends::GpuDeviceInfo& first = probe.backend->device_info();
  std::cout << fmt::format("gpu backend: {}\n", probe.library);
  for (int i = 0; i < first.device_count; ++i) {
    std::unique_ptr<backends::GpuBackend> other;
    backends::GpuBackend* gpu = probe.backend.get();
    if (i != first.index) {
      load.device = i;
      load.library = probe.library;
      other = backends::load_gpu_backend(load);
      gpu = other.get();
    }
    const backends::GpuDeviceInfo& info = gpu->device_info();
    std::cout << fmt::format("gpu {}: {} ({})\n", info.index, info.name, gpu->name());
    std::cout << backends::describe_gpu_device(info);
    if (o.bandwidth) print_bandwidth(*gpu, o);
    if (o.gemm) print_gemms(*gpu, o);
  }
  return kExitOk;
}

}  // namespace

Command add_devices_command(CLI::App& app) {
  auto o = std::make_shared<DevicesOptions>();
  CLI::App* cmd = app.add_subcommand(
      "devices",
      "List the devices Kiln can run on here (the CPU, and the GPU or why there is none)");
  cmd->add_option("--gpu-library", o->gpu_library,
                  "GPU backend library to load instead of searching (also $KILN_GPU_BACKEND)");
  cmd->add_flag("--bandwidth", o->bandwidth,
                "Also time host<->device and device->device copies with device events");
  cmd->add_option("--bandwidth-mib", o->bandwidth_mib, "Bytes per timed copy, in MiB")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--repeats", o->repeats, "Timed copies per kind (the median is shown)")
      ->check(CLI::Range(1, 10000));
  cmd->add_flag("--require-gpu", o->require_gpu, "Exit 1 when no GPU is available");
  cmd->add_flag("--gemm", o->gemm,
                "Also time Kiln's own GEMM against cuBLASLt on ResNet-50's and BERT-base's GEMMs "
                "(fp16; --repeats rounds)");
  cmd->add_option("--gemm-only", o->gemm_only,
                  "Only the --gemm shapes whose label contains this (\"b64\", \"ffn up\")");
  cmd->add_option("--gemm-runs", o->gemm_runs,
                  "Back-to-back runs per timed --gemm round (1 under a profiler)")
      ->check(CLI::Range(1, 1000));
  return {cmd, [o] { return devices(*o); }};
}

}  // namespace kiln::cli
