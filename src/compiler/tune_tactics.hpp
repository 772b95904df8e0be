#pragma once
// Tactics chosen at compile time: one run of the prepared plan on the device, at the graph's
// input shapes, makes every device kernel time its candidates there (cuDNN's convolution
// algorithms, say); what they chose is stored in the engine, so that opening it on a device of
// the same arch and libraries runs the chosen kernels at once instead of timing them again.
#include <string>
#include <vector>

#include "engine/engine_file.hpp"
#include "runtime/executor.hpp"

namespace kiln::compiler {

struct TunedTactics {
  std::vector<engine::StoredTactics> tactics;  // one entry per kernel that timed something
  std::string skipped;                         // why no run was made ("" when one ran)
  double milliseconds = 0;
};

// Runs `prepared` once on zero-filled inputs of the graph's static input shapes. Inputs without
// static dims (shape ranges) skip the run: their kernels time each shape at its first run.
TunedTactics tune_tactics(runtime::Executor& prepared, const ir::Graph& graph);

}  // namespace kiln::compiler
