#pragma once
// The precision gate of `kiln compile`: before an engine is kept, its outputs are compared with
// the reference interpreter on the original graph, on generated inputs (seeded; the low and the
// high end of every declared dim range) or on the user's inputs. An engine that drifts past the
// tolerance is refused with the first drifting node named, unless --allow-drift.
#include <iosfwd>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/inputs.hpp"
#include "cli/precision_options.hpp"
#include "engine/target.hpp"
#include "ir/model.hpp"

namespace kiln::cli {

struct GateOptions {
  bool skip = false;         // --no-verify
  bool allow_drift = false;  // keep a drifting engine, with a warning
  // --verify-timeout: seconds the whole gate may take (0: no limit). The reference interpreter
  // runs what the model asks for (a constant Loop of 2^62 trips), so the gate needs a bound.
  double timeout_seconds = 60;
  std::string calibration_dir;
  InputOptions inputs;
  ToleranceOptions tolerance;
};

void add_gate_options(CLI::App* cmd, GateOptions& options);

struct GateResult {
  bool pass = false;
  std::string failure;  // why not, naming the output and the first drifting node
};

// Checks the engine at `engine_path`, compiled for `target` (the in-memory `compiled` model
// instead when that target cannot run here), against the reference interpreter on `original`;
// prints a summary to `out`.
GateResult run_precision_gate(const std::string& engine_path, const engine::Target& target,
                              const ir::Model& compiled, std::shared_ptr<const ir::Graph> original,
                              const GateOptions& options, std::ostream& out);

}  // namespace kiln::cli
