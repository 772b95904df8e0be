#pragma once
// Which float32 values of a model leave float16's range, measured before `--fp16` converts it:
// the optimized graph runs once on the CPU's fast kernels, every float32 value kept, on the
// precision gate's first input set (the caller's inputs, else seeded random data at the low
// end of the dim ranges). ConvertToFloat16 then leaves every node that reads or writes such a
// value in float32 (mixed precision), so a model whose activations pass 65504 (Caffe2's ResNet-50
// without BatchNormalization folded: 1e5 and more) still gets a float16 engine that computes
// the rest in float16, instead of one the gate refuses for its infinities.
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/precision_gate.hpp"
#include "ir/graph.hpp"

namespace kiln::compiler {

// Values whose magnitude reaches a quarter of float16's largest finite value (65504 / 4): the
// margin covers inputs larger than the measured ones and the sums downstream.
inline constexpr double kFp16RangeLimit = 65504.0 / 4;
// Values at or below this are taken for "minus infinity" sentinels of an additive attention mask
// (-1e9, -3.4e38), not for overflowing activations.
inline constexpr float kMaskSentinel = -1e9f;

struct Fp16RangeReport {
  bool ran = false;
  std::string skipped;           // why the measurement did not run (ran false)
  std::set<std::string> beyond;  // names of the values at or past kFp16RangeLimit
  // The largest magnitudes among them, largest first (name, value), at most 5, for the report.
  std::vector<std::pair<std::string, double>> worst;
  double milliseconds = 0;
};

// Runs `graph` (float32, optimized, before the conversion) on the CPU with every float32 value
// kept, on the gate's first input set. Refuses (skipped, not an error) a graph whose kept values
// would take more than `memory_budget` bytes at those dims, or a run past `timeout_seconds`.
Fp16RangeReport measure_fp16_range(std::shared_ptr<ir::Graph> graph, const GateInputs& inputs,
                                   int threads, size_t memory_budget, double timeout_seconds);

// "fp16: range check: 16 values reach 16376 or more ... (largest: conv5 2.1e+05, ...)\n", or
// the reason the measurement was skipped.
std::string describe_fp16_range(const Fp16RangeReport& report);

}  // namespace kiln::compiler
