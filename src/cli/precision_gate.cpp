#include "cli/precision_gate.hpp"

#include <algorithm>
#include <iostream>

#include <fmt/format.h>

#include "cli/progress.hpp"
#include "runtime/run_control.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {
namespace {

std::string shapes_of(const runtime::Feeds& feeds) {
  std::string s;
  for (const auto& [name, v] : feeds)
    s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", name, v.describe());
  return s;
}

}  // namespace

void add_gate_options(CLI::App* cmd, GateOptions& o) {
  auto* skip = cmd->add_flag("--no-verify", o.skip,
                             "Skip the precision gate (the engine is written unchecked)");
  auto* allow = cmd->add_flag("--allow-drift", o.allow_drift,
                              "Write the engine even when its outputs drift (with a warning)");
  skip->excludes(allow);
  cmd->add_option("--calibration-inputs", o.calibration_dir,
                  "Check on these inputs: a directory of NAME.pb files, or of subdirectories of "
                  "them (one input set each)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--verify-timeout", o.timeout_seconds,
                  "Seconds the precision gate may take before it stops with an error (0: no "
                  "limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  add_input_options(cmd, o.inputs);
  add_tolerance_options(cmd, o.tolerance);
}

GateResult run_precision_gate(const std::string& engine_path, const engine::Target& target,
                              const ir::Model& compiled, std::shared_ptr<const ir::Graph> original,
                              const GateOptions& o, std::ostream& out) {
  runtime::RunControl control;
  if (o.timeout_seconds > 0) {
    control.deadline = runtime::deadline_after(runtime::RunClock::now(),
                                               static_cast<uint64_t>(o.timeout_seconds * 1e6));
  }
  runtime::DriftTolerance tol = o.tolerance.tolerance();
  std::unique_ptr<Session> session;
  std::string what = "the engine";
  if (target.runs_on(engine::Target::host())) {
    session = std::make_unique<Session>(engine_path);
  } else {
    SessionOptions so;
    so.optimize = false;
    session = std::make_unique<Session>(compiled, so);
    what = fmt::format("the compiled graph on this CPU (target {} cannot run here)",
                       target.to_string());
  }

  std::vector<runtime::Feeds> sets;
  std::string source;
  if (!o.calibration_dir.empty()) {
    sets = read_input_sets(o.calibration_dir, session->inputs(), o.inputs.seed);
    source = fmt::format("{} input set{} from {}", sets.size(), sets.size() == 1 ? "" : "s",
                         o.calibration_dir);
  } else {
    auto files = o.inputs.file_map();
    auto dims = o.inputs.dims();
    sets.push_back(make_feeds(session->inputs(), files, dims, o.inputs.seed, DimChoice::Min));
    if (has_bounded_range(session->inputs())) {
      sets.push_back(make_feeds(session->inputs(), files, dims, o.inputs.seed, DimChoice::Max));
      source = "2 input sets (dim ranges at their low and high ends)";
    } else {
      source = "1 input set";
    }
    source += fmt::format(", seed {}", o.inputs.seed);
    if (!files.empty()) source += ", with the --input files";
  }

  std::map<std::string, double> worst;         // output -> largest relative L2 error seen
  std::map<std::string, std::string> skipped;  // output -> why it was not checked
  std::vector<std::string> order;
  for (const IoInfo& io : session->outputs()) order.push_back(io.name);
  Progress progress("precision gate", sets.size());
  for (size_t k = 0; k < sets.size(); ++k) {
    progress.update(k, fmt::format("input set {}", k + 1));
    runtime::PrecisionReport report;
    try {
      report = runtime::check_precision(*session, original, sets[k], tol, &control);
    } catch (const runtime::RunStopped&) {
      progress.finish();
      throw Error(ErrorCode::Unavailable,
                  fmt::format("precision gate: stopped at its time budget of {} s while running "
                              "input set {} of {} ({}); raise the budget with --verify-timeout "
                              "SECONDS (0: no limit) or skip the gate with --no-verify",
                              o.timeout_seconds, k + 1, sets.size(), shapes_of(sets[k])));
    } catch (const Error& e) {
      throw Error(e.code(),
                  fmt::format("precision gate: running input set {} ({}) failed: {}. Give inputs "
                              "the model accepts with --calibration-inputs or --input, or skip "
                              "the gate with --no-verify",
                              k + 1, shapes_of(sets[k]), e.message()));
    }
    for (const auto& c : report.outputs) {
      if (c.skipped.empty())
        worst[c.name] = std::max(worst[c.name], c.stats.rel_l2);
      else
        skipped[c.name] = c.skipped;
    }
    if (report.pass()) continue;
    progress.finish();
    out << fmt::format(
               "precision gate: {} vs the reference on the original graph, input set {} "
               "({}), {}:\n",
               what, k + 1, shapes_of(sets[k]), tol.describe())
        << format_checks(report.outputs, order, tol);
    GateResult r;
    const runtime::OutputCheck* bad = nullptr;
    for (const auto& c : report.outputs) {
      if (!c.pass && !bad) bad = &c;
    }
    r.failure = fmt::format("output '{}' drifts from the reference ({})", bad->name,
                            format_stats(bad->stats));
    if (report.first_drift) {
      r.failure += fmt::format("; first drifting node: {}", format_drift(*report.first_drift));
      if (!report.reproduced) r.failure += " (the drift comes from a kernel, not the graph)";
    }
    return r;
  }
  progress.finish();
  std::string summary;
  for (const std::string& name : order) {
    if (skipped.count(name))
      summary +=
          fmt::format("{}{} not checked: {}", summary.empty() ? "" : ", ", name, skipped[name]);
    else
      summary += fmt::format("{}{} {:.1e}", summary.empty() ? "" : ", ", name, worst[name]);
  }
  out << fmt::format(
      "precision gate: PASS on {}: {} within {} of the reference (worst relative "
      "L2: {})\n",
      source, what, tol.describe(), summary);
  return {true, ""};
}

}  // namespace kiln::cli
