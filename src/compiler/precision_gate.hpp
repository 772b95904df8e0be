#pragma once
// The precision gate of the compile pipeline: before an engine is kept, its outputs are compared
// with the reference interpreter on the original graph, on generated inputs (seeded; the low and
// the high end of every declared dim range) or on the caller's inputs (calibration sets, a
// directory of them, or files per input). An engine that drifts past the tolerance is reported
// with the first drifting node named; the caller decides whether to keep it. Which sizes of a dim
// range are compared with the reference, and which the engine runs alone: gate_sizes.hpp.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/events.hpp"
#include "compiler/gate_sizes.hpp"
#include "engine/target.hpp"
#include "ir/model.hpp"
#include "runtime/precision.hpp"

namespace kiln::compiler {

// Where the gate's inputs come from, first match wins: `calibration` (one map of named values per
// input set) and `calibration_npz` (numpy .npz files, one set each), else `calibration_dir`
// (NAME.pb files, or subdirectories of them), else one set per end of the dim ranges, from `files`
// and seeded random data at `dims`. Inputs a set lacks get random data.
struct GateInputs {
  std::vector<runtime::Feeds> calibration;
  std::vector<std::string> calibration_npz;
  std::string calibration_dir;
  std::map<std::string, std::string> files;  // input name -> TensorProto .pb file
  std::map<std::string, int64_t> dims;       // symbolic dim -> value
  uint64_t seed = 0;
};

struct GateOptions {
  runtime::DriftTolerance tolerance;
  // Seconds the whole gate may take (0: no limit). The reference interpreter runs what the model
  // asks for (a constant Loop of 2^62 trips), so the gate needs a bound.
  double timeout_seconds = 60;
  int threads = 0;             // intra-op threads of the engine's runs; 0: one per core
  std::string device = "cpu";  // where the engine runs (SessionOptions::device)
  GateInputs inputs;
  // FLOPs of reference work a generated input set above the low end of the dim ranges may cost
  // (gate_sizes.hpp); <= 0: none, the top of the ranges is always compared with the reference.
  double reference_flops_budget = kGateReferenceFlops;
};

struct GateReport {
  bool ran = false;  // false when the gate was skipped
  bool pass = false;
  std::string failure;  // why not, naming the output and the first drifting node
  std::string source;   // "2 input sets (dim ranges at their low and high ends), seed 0"
  size_t input_sets = 0;
  // Largest relative L2 error per checked output, in the model's output order.
  std::vector<std::pair<std::string, double>> worst_rel_l2;
  std::map<std::string, std::string> skipped;  // output -> why it was not checked
  // The generated sizes, in order, as "batch=1" (compared with the reference) or "batch=32
  // (engine alone)"; empty for calibration or single-size input sets.
  std::vector<std::string> sizes;
  double seconds = 0;  // the gate's own time
};

// Checks the engine at `engine_path`, compiled for `target` (the in-memory `compiled` model
// instead when that target cannot run here), against the reference interpreter on `original`.
// Its summary (or the failing comparison) goes to `report` as report lines.
GateReport run_precision_gate(const std::string& engine_path, const engine::Target& target,
                              const ir::Model& compiled, std::shared_ptr<const ir::Graph> original,
                              const GateOptions& options, const MessageCallback& report,
                              const ProgressCallback& progress);

}  // namespace kiln::compiler
