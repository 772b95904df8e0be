#pragma once
// What a timing depends on besides the model, printed at the head of `kiln bench` (as trtexec
// does) so that two numbers can be told apart: the CPU, how many CPUs the process may use, the
// threads the kernels ran on, how idle threads wait, and the library versions.
#include <string>

namespace kiln::cli {

struct MachineInfo {
  std::string cpu;         // /proc/cpuinfo's model name ("unknown CPU" when absent)
  int available_cpus = 0;  // CPUs this process may run on (its affinity mask)
  int threads = 0;         // threads the kernels use
  // The OpenMP runtime and how its idle threads wait ("libomp.so.5: idle threads spin, yielding,
  // 200 ms, then sleep (default)").
  std::string wait_policy;
  // The library oneDNN's parallel regions run on ("libomp.so.5"; "libgomp.so.1" on a
  // -DKILN_OPENMP_RUNTIME=gnu build or when the program loaded libgomp first).
  std::string openmp_runtime;
  std::string kiln_version;
  std::string onednn_version;  // "3.5.3 (git hash)"
};

// `threads`: what the kernels run on, as the caller measured it after a run.
MachineInfo machine_info(int threads);

// "name: value" lines.
std::string describe_machine(const MachineInfo& m);

}  // namespace kiln::cli
