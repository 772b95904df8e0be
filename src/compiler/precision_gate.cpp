#include "compiler/precision_gate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "compiler/feeds.hpp"
#include "compiler/flops.hpp"
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

// One input set of the gate: compared with the reference, or run on the engine alone.
struct InputSet {
  runtime::Feeds feeds;
  bool reference = true;
  std::string size;  // "batch=32", for generated sets over a dim range
};

int64_t count_nonfinite(const RtValue& v) {
  if (!v.is_tensor() || !dtype_is_float(v.tensor().dtype())) return 0;
  const Tensor& t = v.tensor();
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += !std::isfinite(t.double_at(i));
  return n;
}

// Why an output of a run on the engine alone at `size` is wrong, or empty: a shape the graph
// does not declare for those dims, or non-finite values where the run compared with the
// reference (`baseline`, the engine's outputs at the low end) had none.
std::string check_alone(const std::vector<IoInfo>& outputs, const runtime::Feeds& actual,
                        const runtime::Feeds& baseline, const GateSize& size) {
  for (const IoInfo& io : outputs) {
    auto it = actual.find(io.name);
    if (it == actual.end()) return fmt::format("output '{}' is missing", io.name);
    if (!it->second.is_tensor() || !io.type.shape) continue;
    const std::vector<int64_t>& got = it->second.tensor().dims();
    const std::vector<Dim>& want = io.type.shape->dims();
    bool fits = got.size() == want.size();
    for (size_t d = 0; fits && d < want.size(); ++d) {
      if (want[d].is_static()) {
        fits = got[d] == want[d].value();
      } else if (want[d].is_symbolic()) {
        auto v = size.dims.find(want[d].symbol_name());
        fits = v == size.dims.end() || got[d] == v->second;
      }
    }
    if (!fits) {
      return fmt::format("output '{}' has shape {}, the graph declares {}", io.name,
                         dims_to_string(got), io.type.shape->to_string());
    }
    auto low = baseline.find(io.name);
    if (low == baseline.end() || count_nonfinite(low->second) > 0) continue;
    if (int64_t bad = count_nonfinite(it->second); bad > 0) {
      return fmt::format(
          "output '{}' has {} non-finite values (NaN or infinity), where the run "
          "at the low end, which matched the reference, had none",
          io.name, bad);
    }
  }
  return "";
}

std::string describe_sizes(const std::vector<GateSize>& sizes, const std::vector<InputSet>& sets,
                           double budget) {
  std::string compared, alone;
  double alone_flops = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::string& list = sizes[k].reference ? compared : alone;
    list += fmt::format("{}{}", list.empty() ? "" : " and ", sets[k].size);
    if (!sizes[k].reference) alone_flops = sizes[k].flops;
  }
  return fmt::format(
      "{} input sets ({} against the reference; {}, the top of the dim ranges, "
      "on the engine alone: the reference would cost it {}FLOPs, over the "
      "gate's budget of {}FLOPs; --verify-full compares it too)",
      sets.size(), compared, alone, si_number(alone_flops), si_number(budget));
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
  const auto started = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
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
  std::vector<InputSet> sets;
  std::vector<GateSize> sizes;  // of generated sets, one per set
  if (!in.calibration.empty() || !in.calibration_npz.empty()) {
    for (const runtime::Feeds& given : in.calibration)
      sets.push_back({make_feeds(session->inputs(), {}, {}, in.seed, DimChoice::Min, given)});
    for (const std::string& path : in.calibration_npz)
      sets.push_back(
          {make_feeds(session->inputs(), {}, {}, in.seed, DimChoice::Min, read_npz(path))});
    r.source = fmt::format("{} calibration input set{}", sets.size(), sets.size() == 1 ? "" : "s");
  } else if (!in.calibration_dir.empty()) {
    for (runtime::Feeds& f : read_input_sets(in.calibration_dir, session->inputs(), in.seed))
      sets.push_back({std::move(f)});
    r.source = fmt::format("{} input set{} from {}", sets.size(), sets.size() == 1 ? "" : "s",
                           in.calibration_dir);
  } else {
    sizes =
        choose_gate_sizes(session->inputs(), *compiled.graph, in.dims, o.reference_flops_budget);
    for (const GateSize& size : sizes) {
      sets.push_back({make_feeds(session->inputs(), in.files, size.dims, in.seed, DimChoice::Min),
                      size.reference, describe_dims(size, in.dims)});
      if (sizes.size() > 1)
        r.sizes.push_back(sets.back().size + (size.reference ? "" : " (engine alone)"));
    }
    if (sizes.size() == 1) {
      r.source = "1 input set";
    } else if (sizes.back().reference) {
      r.source = "2 input sets (dim ranges at their low and high ends)";
    } else {
      r.source = describe_sizes(sizes, sets, o.reference_flops_budget);
    }
    r.source += fmt::format(", seed {}", in.seed);
    if (!in.files.empty()) r.source += ", with the --input files";
  }
  r.input_sets = sets.size();

  std::map<std::string, double> worst;  // output -> largest relative L2 error seen
  std::vector<std::string> order;
  for (const IoInfo& io : session->outputs()) order.push_back(io.name);
  runtime::Feeds low_end;  // the engine's outputs on the first set, which the reference checked
  GateProgress progress(progress_fn, sets.size());
  for (size_t k = 0; k < sets.size(); ++k) {
    progress.update(k, fmt::format("input set {}", k + 1));
    const runtime::Feeds& feeds = sets[k].feeds;
    runtime::PrecisionReport check;
    runtime::Feeds alone;
    try {
      if (sets[k].reference)
        check = runtime::check_precision(*session, original, feeds, tol, &control,
                                         k == 0 ? &low_end : nullptr);
      else
        alone = session->run(runtime::feeds_for(*session->model().graph, feeds), &control);
    } catch (const runtime::RunStopped&) {
      progress.finish();
      throw Error(ErrorCode::Unavailable,
                  fmt::format("precision gate: stopped at its time budget of {} s while running "
                              "input set {} of {} ({}); raise the budget with --verify-timeout "
                              "SECONDS (0: no limit) or skip the gate with --no-verify",
                              o.timeout_seconds, k + 1, sets.size(), shapes_of(feeds)));
    } catch (const Error& e) {
      throw Error(e.code(),
                  fmt::format("precision gate: running input set {} ({}) failed: {}. Give inputs "
                              "the model accepts with --calibration-inputs or --input, or skip "
                              "the gate with --no-verify",
                              k + 1, shapes_of(feeds), e.message()));
    }
    if (!sets[k].reference) {
      std::string why = check_alone(session->outputs(), alone, low_end, sizes[k]);
      if (why.empty()) continue;
      progress.finish();
      r.seconds = seconds();
      report(MessageKind::Report,
             fmt::format("precision gate: {} at the top of the dim ranges, input set {} ({}), "
                         "run alone: {} ({:.2f} s)\n",
                         what, k + 1, shapes_of(feeds), why, r.seconds));
      r.failure = fmt::format("at the top of the dim ranges ({}) {}", sets[k].size, why);
      return r;
    }
    for (const auto& c : check.outputs) {
      if (c.skipped.empty())
        worst[c.name] = std::max(worst[c.name], c.stats.rel_l2);
      else
        r.skipped[c.name] = c.skipped;
    }
    if (check.pass()) continue;
    progress.finish();
    r.seconds = seconds();
    report(MessageKind::Report,
           fmt::format("precision gate: {} vs the reference on the original graph, input set {} "
                       "({}), {} ({:.2f} s):\n",
                       what, k + 1, shapes_of(feeds), tol.describe(), r.seconds) +
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
  r.seconds = seconds();
  report(MessageKind::Report,
         fmt::format("precision gate: PASS on {}: {} within {} of the reference (worst relative "
                     "L2: {}) in {:.2f} s\n",
                     r.source, what, tol.describe(), summary, r.seconds));
  r.pass = true;
  return r;
}

}  // namespace kiln::compiler
