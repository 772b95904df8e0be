// `kiln verify`: run a model (engine or ONNX) through kiln::Session and compare its outputs with
// the reference interpreter on the original ONNX graph and with onnxruntime; on drift, name the
// first node whose output drifts.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/fp16.hpp"
#include "cli/inputs.hpp"
#include "cli/ort_reference.hpp"
#include "cli/precision_options.hpp"
#include "cli/progress.hpp"
#include "compiler/task_metric.hpp"
#include "onnx/onnx_io.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {
namespace fs = std::filesystem;
namespace {

struct VerifyOptions {
  std::string model;
  std::string onnx;  // the original model of an engine, when its stamp's path does not lead there
  std::string reference = "both";
  InputOptions inputs;
  ToleranceOptions tolerance;
  int threads = 0;
  std::string device = "cpu";
  // A task metric instead of the tolerance (with max_drop): the candidate's outputs scored
  // against the reference's (compiler/task_metric.hpp), as `kiln quantize --metric` does.
  std::string metric;
  double max_drop = -1;
  double metric_timeout = 120;
};

// The float32 outputs of one run, as a task metric reads them.
compiler::OutputSets output_sets(const runtime::Feeds& feeds) {
  compiler::OutputSets out;
  for (const auto& [name, value] : feeds) {
    if (value.is_tensor() && value.tensor().dtype() == DataType::Float32) {
      out[name].push_back(value.tensor());
    }
  }
  return out;
}

// The ONNX model to compare against: --onnx, the model itself, or the path stamped into the engine
// (as written, else beside the engine).
std::string source_model(const VerifyOptions& o, const Session& session) {
  if (!o.onnx.empty()) return o.onnx;
  if (!session.engine_info()) return o.model;
  const std::string& stamped = session.engine_info()->source_path;
  KILN_CHECK(!stamped.empty(), ErrorCode::NotFound,
             "the engine '{}' does not record its source model: give it with --onnx PATH", o.model);
  if (fs::exists(stamped)) return stamped;
  fs::path beside = fs::path(o.model).parent_path() / fs::path(stamped).filename();
  if (fs::exists(beside)) return beside.string();
  fail(ErrorCode::NotFound,
       "the engine's source model '{}' is not found: give the original ONNX model with --onnx "
       "PATH",
       stamped);
}

void warn_if_other_model(const Session& session, const std::string& source) {
  if (!session.engine_info() || session.engine_info()->source_hash == 0) return;
  std::ifstream in(source, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (engine::hash_bytes(bytes.data(), bytes.size()) != session.engine_info()->source_hash) {
    std::cerr << fmt::format(
        "kiln: warning: '{}' is not the file the engine was compiled from (its hash differs "
        "from the engine's stamp); comparing anyway\n",
        source);
  }
}

runtime::Feeds graph_feeds(const ir::Graph& g, const runtime::Feeds& feeds) {
  runtime::Feeds own;
  for (const ir::Value* v : g.inputs()) {
    auto it = feeds.find(v->name());
    if (it != feeds.end()) own[v->name()] = it->second;
  }
  return own;
}

bool all_pass(const std::vector<runtime::OutputCheck>& checks) {
  for (const auto& c : checks) {
    if (!c.pass) return false;
  }
  return true;
}

int verify(const VerifyOptions& o) {
  auto files = o.inputs.file_map();
  auto dims = o.inputs.dims();
  runtime::DriftTolerance tol = o.tolerance.tolerance();
  bool use_interpreter = o.reference != "onnxruntime";
  bool use_ort = o.reference != "interpreter";
  Progress progress("verify", 2 + (use_interpreter ? 1 : 0) + (use_ort ? 1 : 0));

  progress.step("opening the model");
  SessionOptions so;
  so.threads = o.threads;
  so.device = o.device;
  Session session(o.model, so);
  // A --fp16 / --bf16 engine is held to its precision's limit unless --max-rel-l2 says
  // otherwise.
  const auto& metadata = session.model().metadata;
  if (auto it = metadata.find(kPrecisionMetadataKey); it != metadata.end()) {
    if (const double limit = default_max_rel_l2_of_precision(it->second); limit > 0) {
      ToleranceOptions half = o.tolerance;
      use_half_tolerance(half, limit);
      tol = half.tolerance();
    }
  }
  std::string source = source_model(o, session);
  warn_if_other_model(session, source);
  ir::Model original = onnx_io::import_model_file(source);
  runtime::Feeds feeds = make_feeds(session.inputs(), files, dims, o.inputs.seed);
  std::vector<std::string> order;
  for (const IoInfo& out : session.outputs()) order.push_back(out.name);

  std::cout << fmt::format("candidate: {} ({})\n", o.model,
                           session.engine_info() ? "engine" : "ONNX, optimized at open");
  std::cout << fmt::format("original model: {}\n", source) << describe_feeds(feeds);
  std::optional<compiler::TaskMetric> metric;
  if (!o.metric.empty() || o.max_drop >= 0) {
    metric = compiler::parse_task_metric(o.metric.empty() ? "cosine" : o.metric);
    metric->timeout_seconds = o.metric_timeout;
  }
  const bool by_metric = metric && o.max_drop >= 0;
  if (by_metric) {
    std::cout << fmt::format("task metric: {}, the drop from the reference's score at most {}\n",
                             compiler::metric_name(*metric), o.max_drop);
  } else {
    std::cout << fmt::format("tolerance: {}\n", tol.describe());
  }
  // With --metric: the candidate's score against `expected`; with --max-drop too, whether its
  // drop is within it (else true: the tolerance decides).
  auto metric_check = [&](const runtime::Feeds& expected, const runtime::Feeds& candidate,
                          const std::string& against) {
    if (!metric) return true;
    compiler::MetricEvaluator m(*metric, output_sets(expected));
    const double reference = m.reference_score();
    const double score = m.score(output_sets(candidate));
    const double drop = m.higher_is_better() ? reference - score : score - reference;
    const bool ok = !by_metric || drop <= o.max_drop;
    std::cout << fmt::format(
        "  metric {} against {}: reference {:.5f}, candidate {:.5f}, {} {:.5f}{}\n",
        compiler::metric_name(*metric), against, reference, score,
        m.higher_is_better() ? "drop" : "rise", drop,
        by_metric ? fmt::format(" (<= {}) {}", o.max_drop, ok ? "PASS" : "FAIL") : "");
    return ok;
  };
  progress.step("running the candidate");
  runtime::Feeds actual = session.run(feeds);
  // A float16-IO engine's outputs are compared in the original's types; its float16 feeds are
  // widened for the original (feeds_for).
  auto in_reference_types = [&actual](const runtime::Feeds& expected) {
    runtime::Feeds converted = actual;
    for (auto& [name, value] : converted) {
      auto it = expected.find(name);
      if (it != expected.end()) value = runtime::as_reference_float_type(value, it->second);
    }
    return converted;
  };

  bool pass = true;
  std::vector<std::string> compared, failed;
  if (use_interpreter) {
    progress.step("running the reference interpreter");
    runtime::Interpreter ref(original.graph);
    runtime::Feeds expected =
        ref.run(graph_feeds(*original.graph, runtime::feeds_for(*original.graph, feeds)));
    auto checks = runtime::compare_outputs(in_reference_types(expected), expected, tol);
    runtime::skip_nondeterministic(*original.graph, checks);
    progress.finish();
    compared.push_back("the reference interpreter");
    if (by_metric) {
      std::cout << "against the reference interpreter on the original graph:\n";
      if (!metric_check(expected, in_reference_types(expected), compared.back())) {
        pass = false;
        failed.push_back(compared.back());
      }
    } else {
      std::cout << "against the reference interpreter on the original graph:\n"
                << format_checks(checks, order, tol);
      metric_check(expected, in_reference_types(expected), compared.back());
    }
    if (!by_metric && !all_pass(checks)) {
      pass = false;
      failed.push_back(compared.back());
      auto drift = runtime::find_first_drift(original.graph, session.model().graph, feeds, tol);
      if (drift) {
        std::cout << "  first drifting node: " << format_drift(*drift) << "\n";
      } else {
        std::cout << "  the drift does not reproduce on the reference kernels of the candidate's "
                     "graph: a kernel the session runs differs from the reference\n";
      }
    }
  }
  if (use_ort) {
    OrtStatus ort = probe_onnxruntime();
    runtime::Feeds ort_feeds =
        graph_feeds(*original.graph, runtime::feeds_for(*original.graph, feeds));
    runtime::Feeds expected;
    bool ran = false;
    if (!ort.available) {
      KILN_CHECK(o.reference != "onnxruntime", ErrorCode::Unavailable,
                 "onnxruntime is not available ({}); pip install onnxruntime", ort.reason);
      std::cout << "onnxruntime: not installed, skipped (pip install onnxruntime)\n";
    } else {
      progress.step("running onnxruntime");
      try {
        expected = run_onnxruntime(source, ort_feeds, false, o.threads);
        ran = true;
      } catch (const Error& e) {
        // A model onnxruntime cannot run is its limit, not a drift; asked for explicitly, it is
        // an error.
        if (o.reference == "onnxruntime") throw;
        progress.finish();
        std::cout << fmt::format("onnxruntime {}: cannot run the model, skipped: {}\n", ort.version,
                                 e.message());
      }
    }
    if (ran) {
      auto checks = runtime::compare_outputs(in_reference_types(expected), expected, tol);
      runtime::skip_nondeterministic(*original.graph, checks);
      progress.finish();
      std::cout << fmt::format("against onnxruntime {} on the original model:\n", ort.version);
      compared.push_back("onnxruntime " + ort.version);
      if (by_metric) {
        if (!metric_check(expected, in_reference_types(expected), compared.back())) {
          pass = false;
          failed.push_back(compared.back());
        }
      } else {
        std::cout << format_checks(checks, order, tol);
        metric_check(expected, in_reference_types(expected), compared.back());
      }
      if (!by_metric && !all_pass(checks)) {
        pass = false;
        failed.push_back(compared.back());
        runtime::Feeds ort_values = run_onnxruntime(source, ort_feeds, true, o.threads);
        runtime::Feeds candidate_values = runtime::run_keeping_values(session.model().graph, feeds);
        auto drift = runtime::first_drift_in(*original.graph, ort_values, candidate_values, tol,
                                             session.model().graph.get());
        if (drift) {
          std::cout << "  first drifting node: " << format_drift(*drift) << "\n";
        } else {
          std::cout << "  the drift does not reproduce on the reference kernels of the "
                       "candidate's graph: a kernel the session runs differs from onnxruntime\n";
        }
      }
    }
  }
  progress.finish();
  auto join = [](const std::vector<std::string>& items) {
    std::string s;
    for (size_t i = 0; i < items.size(); ++i) s += (i ? " and " : "") + items[i];
    return s;
  };
  if (compared.empty()) {
    std::cout << "verify: nothing to compare against\n";
    return kExitFailure;
  }
  if (pass) {
    std::cout << fmt::format("verify: PASS: {} output{} within {} of {}\n", order.size(),
                             order.size() == 1 ? "" : "s",
                             by_metric ? fmt::format("--max-drop {} of the metric", o.max_drop)
                                       : std::string("tolerance"),
                             join(compared));
  } else {
    std::cout << fmt::format("verify: FAIL: {} from {}\n",
                             by_metric ? "the metric drops past --max-drop" : "outputs drift",
                             join(failed));
  }
  return pass ? kExitOk : kExitFailure;
}

}  // namespace

Command add_verify_command(CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Compare a model's outputs (engine or ONNX) with the reference interpreter on the original "
      "graph and with onnxruntime; name the first node that drifts");
  cmd->add_option("model", o->model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--onnx", o->onnx,
                  "The original ONNX model of an engine (default: the path stamped in it)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--reference", o->reference,
                  "What to compare against; 'both' skips onnxruntime when it is not installed")
      ->check(CLI::IsMember({"onnxruntime", "interpreter", "both"}))
      ->capture_default_str();
  add_input_options(cmd, o->inputs);
  add_tolerance_options(cmd, o->tolerance);
  cmd->add_option("--metric", o->metric,
                  "Also score the outputs on a task metric against each reference: cosine, top1, "
                  "max-abs-steps or script:PATH (as kiln quantize --metric)");
  cmd->add_option("--max-drop", o->max_drop,
                  "Pass when the metric drops at most this much from the reference's own score "
                  "(instead of the tolerance; the metric defaults to cosine)")
      ->check(CLI::Range(0.0, 1e30));
  cmd->add_option("--metric-timeout", o->metric_timeout,
                  "Seconds one run of a script metric may take before it is stopped")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  cmd->add_option("--device", o->device,
                  "Devices the engine runs on: cpu, gpu, gpu,cpu (the reference stays on the "
                  "host)");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  return {cmd, [o] { return verify(*o); }};
}

}  // namespace kiln::cli
