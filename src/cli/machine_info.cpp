#include "cli/machine_info.hpp"

#include <sched.h>

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "backends/cpu/openmp_runtime.hpp"

namespace kiln::cli {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    // x86: "model name"; some ARM kernels: "Model" or "Hardware".
    for (const char* key : {"model name", "Model", "Hardware"}) {
      if (line.rfind(key, 0) != 0) continue;
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string value = line.substr(line.find_first_not_of(" \t", colon + 1));
      if (!value.empty()) return value;
    }
  }
  return "unknown CPU";
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace

MachineInfo machine_info(int threads) {
  MachineInfo m;
  m.cpu = cpu_model();
  m.available_cpus = affinity_cpus();
  m.threads = threads;
  m.wait_policy = backends::cpu::describe_openmp_wait_policy();
  m.openmp_runtime = backends::cpu::openmp_kernels_runtime();
  m.kiln_version = KILN_VERSION;
  const dnnl_version_t* v = dnnl_version();
  m.onednn_version = fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
  if (v->hash && *v->hash && std::string(v->hash) != "N/A")
    m.onednn_version += fmt::format(" ({})", v->hash);
  return m;
}

std::string describe_machine(const MachineInfo& m) {
  return fmt::format(
      "cpu: {} ({} CPUs available)\nthreads: {}\nthread wait policy: {}\nversions: kiln {}, "
      "oneDNN {}\n",
      m.cpu, m.available_cpus, m.threads, m.wait_policy, m.kiln_version, m.onednn_version);
}

}  // namespace kiln::cli
