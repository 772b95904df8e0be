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

}  // namespace kiln::backends::cpu
