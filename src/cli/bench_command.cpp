// `kiln bench`: warm-up runs, then latency percentiles and throughput at a batch and thread count.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/progress.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {
namespace {

struct BenchOptions {
  std::string model;
  InputOptions inputs;
  int64_t batch = 0;  // 0: whatever the inputs have
  int threads = 0;
  bool no_optimize = false;
  int warmup = 3;
  int iterations = 0;
  double duration = 0;  // seconds; 0: run `iterations`
  bool json = false;
};

struct Stats {
  double mean = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, total_s = 0;
};

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double q) {
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

Stats summarize(std::vector<double> ms) {
  Stats s;
  s.total_s = std::accumulate(ms.begin(), ms.end(), 0.0) / 1000;
  std::sort(ms.begin(), ms.end());
  s.mean = s.total_s * 1000 / static_cast<double>(ms.size());
  s.min = ms.front();
  s.max = ms.back();
  s.p50 = percentile(ms, 0.50);
  s.p90 = percentile(ms, 0.90);
  s.p99 = percentile(ms, 0.99);
  return s;
}

// --batch sets dim 0 of every input whose dim 0 is symbolic; a fixed one must already agree.
void apply_batch(const std::vector<IoInfo>& inputs, int64_t batch,
                 std::map<std::string, int64_t>& dims) {
  for (const IoInfo& in : inputs) {
    if (!in.type.shape || in.type.shape->rank() == 0) continue;
    const Dim& d = (*in.type.shape)[0];
    if (d.is_symbolic()) {
      auto [it, inserted] = dims.emplace(d.symbol_name(), batch);
      if (!inserted && it->second != batch)
        throw UsageError(
            fmt::format("--batch {} and --dim {}={} disagree", batch, d.symbol_name(), it->second));
      KILN_CHECK_ARG(batch >= d.min() && batch <= d.max(),
                     "--batch {} is outside the range {} of input '{}'", batch, d.to_string(),
                     in.name);
    } else {
      KILN_CHECK_ARG(!d.is_static() || d.value() == batch,
                     "input '{}' has a fixed batch dim of {}: --batch {} needs a model with a "
                     "dynamic first dim (kiln compile --shape-range {}:1..N...)",
                     in.name, d.value(), batch, in.name);
    }
  }
}

int64_t batch_of(const runtime::Feeds& feeds) {
  for (const auto& [name, v] : feeds) {
    if (v.is_tensor() && v.tensor().rank() > 0) return v.tensor().dim(0);
  }
  return 1;
}

std::string to_json(const BenchOptions& o, const runtime::Feeds& feeds, int64_t batch, size_t runs,
                    const Stats& s, double throughput) {
  rapidjson::StringBuffer sb;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("model");
  w.String(o.model.c_str());
  w.Key("batch");
  w.Int64(batch);
  w.Key("threads");
  w.Int(o.threads);
  w.Key("warmup");
  w.Int(o.warmup);
  w.Key("iterations");
  w.Uint64(runs);
  w.Key("inputs");
  w.StartObject();
  for (const auto& [name, v] : feeds) {
    w.Key(name.c_str());
    w.String(v.describe().c_str());
  }
  w.EndObject();
  w.Key("latency_ms");
  w.StartObject();
  for (auto [key, value] : {std::pair{"mean", s.mean},
                            {"min", s.min},
                            {"p50", s.p50},
                            {"p90", s.p90},
                            {"p99", s.p99},
                            {"max", s.max}}) {
    w.Key(key);
    w.Double(value);
  }
  w.EndObject();
  w.Key("throughput_per_s");
  w.Double(throughput);
  w.Key("total_s");
  w.Double(s.total_s);
  w.EndObject();
  return std::string(sb.GetString()) + "\n";
}

int bench(BenchOptions o) {
  auto files = o.inputs.file_map();
  auto dims = o.inputs.dims();
  SessionOptions so;
  so.threads = o.threads;
  so.optimize = !o.no_optimize;
  Session session(o.model, so);
  if (o.batch > 0) apply_batch(session.inputs(), o.batch, dims);
  runtime::Feeds feeds = make_feeds(session.inputs(), files, dims, o.inputs.seed);
  int64_t batch = o.batch > 0 ? o.batch : batch_of(feeds);
  if (o.iterations == 0 && o.duration == 0) o.iterations = 20;

  {
    Progress progress("warm-up", static_cast<size_t>(o.warmup));
    for (int i = 0; i < o.warmup; ++i) {
      session.run(feeds);
      progress.step();
    }
  }
  std::vector<double> ms;
  {
    using Clock = std::chrono::steady_clock;
    Progress progress("bench", o.duration > 0 ? 0 : static_cast<size_t>(o.iterations));
    auto begin = Clock::now();
    for (;;) {
      auto start = Clock::now();
      session.run(feeds);
      auto end = Clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
      progress.step(fmt::format("{:.3f} ms", ms.back()));
      if (o.duration > 0 ? std::chrono::duration<double>(end - begin).count() >= o.duration
                         : ms.size() >= static_cast<size_t>(o.iterations))
        break;
    }
  }
  Stats s = summarize(ms);
  double throughput = static_cast<double>(batch) * static_cast<double>(ms.size()) / s.total_s;
  if (o.json) {
    std::cout << to_json(o, feeds, batch, ms.size(), s, throughput);
    return kExitOk;
  }
  std::cout << fmt::format("model: {}\n", o.model) << describe_feeds(feeds);
  std::cout << fmt::format("batch {}, threads {}, {} warm-up runs, {} timed runs in {:.3f} s\n",
                           batch, o.threads == 0 ? std::string("auto") : std::to_string(o.threads),
                           o.warmup, ms.size(), s.total_s);
  std::cout << fmt::format(
      "latency ms: mean {:.3f}  min {:.3f}  p50 {:.3f}  p90 {:.3f}  p99 {:.3f}  max {:.3f}\n",
      s.mean, s.min, s.p50, s.p90, s.p99, s.max);
  std::cout << fmt::format("throughput: {:.2f} inferences/s\n", throughput);
  return kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure latency (p50/p90/p99) and throughput after warm-up runs");
  cmd->add_option("model", o->model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  add_input_options(cmd, o->inputs);
  cmd->add_option("--batch", o->batch, "Batch size: dim 0 of every input whose dim 0 is dynamic")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-optimize", o->no_optimize, "ONNX models: run the graph as imported");
  cmd->add_option("--warmup", o->warmup, "Untimed runs first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* iterations = cmd->add_option("--iterations", o->iterations, "Timed runs (default 20)")
                         ->check(CLI::PositiveNumber);
  auto* duration = cmd->add_option("--duration", o->duration,
                                   "Run for this many seconds instead of a fixed count")
                       ->check(CLI::PositiveNumber);
  iterations->excludes(duration);
  cmd->add_flag("--json", o->json, "Print the results as JSON (for scripts)");
  return {cmd, [o] { return bench(*o); }};
}

}  // namespace kiln::cli
