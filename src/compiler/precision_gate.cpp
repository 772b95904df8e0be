#include "compiler/precision_gate.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "compiler/feeds.hpp"
#include "compiler/npz.hpp"
#include "compiler/precision_report.hpp"
#include "runtime/run_control.hpp"
#include "runtime/session.hpp"

namespace kiln::compiler {
namespace {

std::string shapes_of(const runtime::Feeds& feeds) {
  std::string s;
  for (const auto& [name, v] : feeds)
    s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", name, v.describe());
  return s;
}

// Progress of the gate, erased however it ends.
class GateProgress {
 public:
  GateProgress(const ProgressCallback& fn, size_t total) : fn_(fn), total_(total) {}
  ~GateProgress() { finish(); }
  void update(size_t done, const std::string& detail) {
    if (fn_) fn_({.stage = "precision gate", .done = done, .total = total_, .detail = detail});
    open_ = true;
  }
  void finish() {
    if (fn_ && open_) fn_({.stage = "precision gate", .total = total_, .finished = true});
    open_ = false;
  }

 private:
  const ProgressCallback& fn_;
  size_t total_;
  bool open_ = false;
};

}  // namespace

GateReport run_precision_gate(const std::string& engine_path, const engine::Target& target,
                              const ir::Model& compiled, std::shared_ptr<const ir::Graph> original,
                              const GateOptions& o, const MessageCallback& report,
                              const ProgressCallback& progress_fn) {
  runtime::RunControl control;
  if (o.timeout_seconds > 0) {
    control.deadline = runtime::deadline_after(runtime::RunClock::now(),
                                               static_cast<uint64_t>(o.timeout_seconds * 1e6));
  }
  const runtime::DriftTolerance& tol = o.tolerance;
  const GateInputs& in = o.inputs;
  SessionOptions so;
  so.threads = o.threads;
  so.device = o.device;
  std::unique_ptr<Session> session;
  std::string what = "the engine";
  if (target.runs_on(engine::Target::host())) {
    session = std::make_unique<Session>(engine_path, so);
  } else {
    so.optimize = false;
    session = std::make_unique<Session>(compiled, so);
    what = fmt::format("the compiled graph on this CPU (target {} cannot run here)",
                       target.to_string());
  }

  GateReport r;
  r.ran = true;
  std::vector<runtime::Feeds> sets;
  if (!in.calibration.empty() || !in.calibration_npz.empty()) {
    for (const runtime::Feeds& given : in.calibration)
      sets.push_back(make_feeds(session->inputs(), {}, {}, in.seed, DimChoice::Min, given));
    for (const std::string& path : in.calibration_npz)
      sets.push_back(
          make_feeds(session->inputs(), {}, {}, in.seed, DimChoice::Min, read_npz(path)));
    r.source = fmt::format("{} calibration input set{}", sets.size(), sets.size() == 1 ? "" : "s");
  } else if (!in.calibration_dir.empty()) {
    sets = read_input_sets(in.calibration_dir, session->inputs(), in.seed);
    r.source = fmt::format("{} input set{} from {}", sets.size(), sets.size() == 1 ? "" : "s",
                           in.calibration_dir);
  } else {
    sets.push_back(make_feeds(session->inputs(), in.files, in.dims, in.seed, DimChoice::Min));
    if (has_bounded_range(session->inputs())) {
      sets.push_back(make_feeds(session->inputs(), in.files, in.dims, in.seed, DimChoice::Max));
      r.source = "2 input sets (dim ranges at their low and high ends)";
    } else {
      r.source = "1 input set";
    }
    r.source += fmt::format(", seed {}", in.seed);
    if (!in.files.empty()) r.source += ", with the --input files";
  }
  r.input_sets = sets.size();

  std::map<std::string, double> worst;  // output -> largest relative L2 error seen
  std::vector<std::string> order;
  for (const IoInfo& io : session->outputs()) order.push_back(io.name);
  GateProgress progress(progress_fn, sets.size());
  for (size_t k = 0; k < sets.size(); ++k) {
    progress.update(k, fmt::format("input set {}", k + 1));
    runtime::PrecisionReport check;
    try {
      check = runtime::check_precision(*session, original, sets[k], tol, &control);
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
    for (const auto& c : check.outputs) {
      if (c.skipped.empty())
        worst[c.name] = std::max(worst[c.name], c.stats.rel_l2);
      else
        r.skipped[c.name] = c.skipped;
    }
    if (check.pass()) continue;
    progress.finish();
    report(MessageKind::Report,
           fmt::format("precision gate: {} vs the reference on the original graph, input set {} "
                       "({}), {}:\n",
                       what, k + 1, shapes_of(sets[k]), tol.describe()) +
               format_checks(check.outputs, order, tol));
    const runtime::OutputCheck* bad = nullptr;
    for (const auto& c : check.outputs) {
      if (!c.pass && !bad) bad = &c;
    }
    r.failure = fmt::format("output '{}' drifts from the reference ({})", bad->name,
                            format_stats(bad->stats));
    if (check.first_drift) {
      r.failure += fmt::format("; first drifting node: {}", format_drift(*check.first_drift));
      if (!check.reproduced) r.failure += " (the drift comes from a kernel, not the graph)";
    }
    for (const std::string& name : order) {
      if (worst.count(name)) r.worst_rel_l2.emplace_back(name, worst[name]);
    }
    return r;
  }
  progress.finish();
  std::string summary;
  for (const std::string& name : order) {
    if (r.skipped.count(name)) {
      summary +=
          fmt::format("{}{} not checked: {}", summary.empty() ? "" : ", ", name, r.skipped[name]);
    } else {
      summary += fmt::format("{}{} {:.1e}", summary.empty() ? "" : ", ", name, worst[name]);
      r.worst_rel_l2.emplace_back(name, worst[name]);
    }
  }
  report(MessageKind::Report,
         fmt::format("precision gate: PASS on {}: {} within {} of the reference (worst relative "
                     "L2: {})\n",
                     r.source, what, tol.describe(), summary));
  r.pass = true;
  return r;
}

}  // namespace kiln::compiler
