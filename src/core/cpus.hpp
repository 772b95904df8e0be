#pragma once
// How many CPUs this process may run on: its affinity mask (a container's or taskset's limit),
// else what the machine reports; at least 1.
#include <cstddef>

namespace kiln {

size_t online_cpus();

}  // namespace kiln
