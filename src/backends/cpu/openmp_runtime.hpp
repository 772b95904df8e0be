#pragma once
// Which OpenMP runtime runs the CPU kernels in this process, as the dynamic loader bound it, and
// how its idle threads wait. Kiln links LLVM's libomp (src/CMakeLists.txt): oneDNN's parallel
// regions and Kiln's own loops then run on libomp, whose idle threads spin for KMP_BLOCKTIME
// (yielding the core whenever another thread wants it) and then sleep. A program that puts GNU
// OpenMP (libgomp) ahead of it in the search order (LD_PRELOAD, or an executable linked with
// -fopenmp that loads libkiln.so) gets oneDNN on libgomp instead; these say so.
#include <string>

namespace kiln::backends::cpu {

// The file name of the library that oneDNN's parallel regions run on ("libomp.so.5",
// "libgomp.so.1"), "none" when no OpenMP runtime is loaded.
std::string openmp_kernels_runtime();

// The file name of the library that Kiln's own parallel loops run on ("none": built without
// OpenMP, so they run on the calling thread).
std::string openmp_loops_runtime();

// One line for `kiln bench` and `kiln devices`: the runtime and how its idle threads wait, e.g.
// "libomp.so.5: idle threads spin, yielding, 200 ms, then sleep (default)".
std::string describe_openmp_wait_policy();

// How long the idle workers of the teams this thread forks from now on spin before they sleep:
// libomp's process default (KMP_BLOCKTIME, 200 ms) or briefly (1 ms). A session whose runs
// overlap other threads' runs asks for the brief spin on its multi-thread executor, so that the
// team's worker does not spin on a core the other runs need for 200 ms after each run (4 Python
// threads x 200 MLP runs on 2 cores: 41 -> 32 ms; bench/results/2026-12-07g-cpu-team-spin.md);
// alone it keeps the default, which a brief spin made bimodal beside a busy process
// (2026-12-06b-cpu-thread-pool.md). Does nothing unless the kernels run on libomp and the user
// left KMP_BLOCKTIME unset.
enum class TeamSpin { Default, Brief };
void set_team_spin(TeamSpin spin);

// The spin in ms that this thread's next team gets; -1 where the runtime does not say.
int team_spin_ms();

}  // namespace kiln::backends::cpu
