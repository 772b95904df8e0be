#pragma once
// A model's intermediate float32 values on real inputs: the graph runs on the CPU's fast kernels
// with every float32 value a node writes kept as an extra output for the run, and each is handed
// to an observer. The fp16 range check (fp16_range.hpp) and the INT8 calibration (quantize.hpp)
// are built on it.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/precision_gate.hpp"
#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "runtime/precision.hpp"

namespace kiln::compiler {

// The input sets GateInputs names, in the gate's order of sources (precision_gate.hpp): the
// calibration sets or .npz files, else a directory of them, else one set of the given files and
// seeded random data at the low end of the dim ranges. At most `max_sets` (0: all).
std::vector<runtime::Feeds> input_sets_for(const ir::Graph& graph, const GateInputs& inputs,
                                           size_t max_sets = 0);

struct ObserveOptions {
  int threads = 0;
  // Bytes the kept values of one run may take at their declared shapes (symbolic dims at 1);
  // beyond it nothing runs and observe_float_values says why.
  size_t memory_budget = size_t{2} << 30;
  double timeout_seconds = 0;  // per run; 0: none
};

using ValueObserver = std::function<void(const ir::Value& value, const Tensor& data, size_t set)>;

// Runs `graph` once per set in `sets`, calling `observe` for every float32 value a node writes
// (the graph's own outputs included). Returns "" when it ran, else why it did not (the memory
// budget). Errors of the runs propagate. The graph's outputs are restored however it ends.
std::string observe_float_values(const std::shared_ptr<ir::Graph>& graph,
                                 const std::vector<runtime::Feeds>& sets,
                                 const ObserveOptions& options, const ValueObserver& observe);

}  // namespace kiln::compiler
