#pragma once
// What a timing depends on besides the model, printed at the head of `kiln bench` (as trtexec
// does) so that two numbers can be told apart: the CPU, how many CPUs the process may use, the
// threads the kernels ran on, how idle threads wait, and the library versions.
#include <string>

namespace kiln::cli {

struct MachineInfo {
  std::string cpu;          // /proc/cpuinfo's model name ("unknown CPU" when absent)
  int available_cpus = 0;   // CPUs this process may run on (its affinity mask)
  int threads = 0;          // threads the kernels use
  std::string wait_policy;  // "OMP_WAIT_POLICY=PASSIVE", or the runtime's default
  std::string kiln_version;
  std::string onednn_version;  // "3.5.3 (git hash)"
};

// `threads`: what the kernels run on, as the caller measured it after a run.
MachineInfo machine_info(int threads);

// "name: value" lines.
std::string describe_machine(const MachineInfo& m);

}  // namespace kiln::cli
