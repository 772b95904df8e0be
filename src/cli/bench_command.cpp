// `kiln bench`: warm-up runs, then timed runs for at least a count and a duration; latency
// percentiles, CPU against wall time and throughput at a batch and thread count, under a header
// naming the machine, and a warning when the spread says the machine is noisy.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include "backends/cpu/cpu_backend.hpp"
#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/machine_info.hpp"
#include "cli/progress.hpp"
#include "cli/timing_stats.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {
namespace {

struct BenchOptions {
  std::string model;
  InputOptions inputs;
  int64_t batch = 0;  // 0: whatever the inputs have
  int threads = 0;
  std::string device = "cpu";
  bool no_optimize = false;
  int warmup = 3;
  // Timed runs go on until both minimums are met, as trtexec's --iterations and --duration: a
  // count alone gives a fast model too short a sample to see the machine's noise.
  int iterations = 10;
  double duration = 3;  // seconds
  bool json = false;
};

// The calling process's CPU time, all threads: compared with wall time it shows how many cores
// a run kept busy (spinning idle threads included).
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
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

struct BenchResult {
  MachineInfo machine;
  int64_t batch = 1;
  double elapsed_s = 0;   // wall time of the timed runs, gaps included
  TimingStats wall, cpu;  // per run, ms
  // Per run, ms, by device events around the device's work (empty when nothing ran there):
  // what the device itself took, without the host's copies of feeds and results.
  TimingStats device;
  size_t replayed_segments = 0, replay_segments = 0;
  double throughput = 0;
  std::vector<std::string> noise;
};

void write_stats(rapidjson::PrettyWriter<rapidjson::StringBuffer>& w, const char* key,
                 const TimingStats& s) {
  w.Key(key);
  w.StartObject();
  for (auto [name, value] : {std::pair{"min", s.min},
                             {"mean", s.mean},
                             {"median", s.median},
                             {"p50", s.median},
                             {"p90", s.p90},
                             {"p95", s.p95},
                             {"p99", s.p99},
                             {"max", s.max},
                             {"stddev", s.stddev},
                             {"cv", s.cv()}}) {
    w.Key(name);
    w.Double(value);
  }
  w.EndObject();
}

std::string to_json(const BenchOptions& o, const runtime::Feeds& feeds, const BenchResult& r) {
  rapidjson::StringBuffer sb;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(sb);
  auto string = [&](const char* key, const std::string& value) {
    w.Key(key);
    w.String(value.c_str());
  };
  w.StartObject();
  string("model", o.model);
  w.Key("machine");
  w.StartObject();
  string("cpu", r.machine.cpu);
  w.Key("available_cpus");
  w.Int(r.machine.available_cpus);
  w.Key("threads");
  w.Int(r.machine.threads);
  string("thread_wait_policy", r.machine.wait_policy);
  string("openmp_runtime", r.machine.openmp_runtime);
  string("kiln_version", r.machine.kiln_version);
  string("onednn_version", r.machine.onednn_version);
  w.EndObject();
  w.Key("batch");
  w.Int64(r.batch);
  w.Key("threads");
  w.Int(o.threads);
  w.Key("warmup");
  w.Int(o.warmup);
  w.Key("min_iterations");
  w.Int(o.iterations);
  w.Key("min_duration_s");
  w.Double(o.duration);
  w.Key("iterations");
  w.Uint64(r.wall.count);
  w.Key("inputs");
  w.StartObject();
  for (const auto& [name, v] : feeds) string(name.c_str(), v.describe());
  w.EndObject();
  write_stats(w, "latency_ms", r.wall);
  write_stats(w, "cpu_ms", r.cpu);
  if (r.device.count > 0) write_stats(w, "device_ms", r.device);
  w.Key("replayed_segments");
  w.Uint64(r.replayed_segments);
  w.Key("replay_segments");
  w.Uint64(r.replay_segments);
  w.Key("cpu_per_wall");
  w.Double(r.wall.total > 0 ? r.cpu.total / r.wall.total : 0);
  w.Key("throughput_per_s");
  w.Double(r.throughput);
  w.Key("total_s");
  w.Double(r.wall.total / 1000);
  w.Key("elapsed_s");
  w.Double(r.elapsed_s);
  w.Key("noisy");
  w.Bool(!r.noise.empty());
  w.Key("warnings");
  w.StartArray();
  for (const std::string& n : r.noise) w.String(n.c_str());
  w.EndArray();
  w.EndObject();
  return std::string(sb.GetString()) + "\n";
}

std::string stats_line(const TimingStats& s) {
  return fmt::format(
      "min {:.3f}  mean {:.3f}  median {:.3f}  p90 {:.3f}  p95 {:.3f}  p99 {:.3f}  max {:.3f}  "
      "(stddev {:.3f}, CV {:.1f}%)",
      s.min, s.mean, s.median, s.p90, s.p95, s.p99, s.max, s.stddev, 100 * s.cv());
}

int bench(BenchOptions o) {
  auto files = o.inputs.file_map();
  auto dims = o.inputs.dims();
  SessionOptions so;
  so.threads = o.threads;
  so.device = o.device;
  so.optimize = !o.no_optimize;
  Session session(o.model, so);
  if (o.batch > 0) apply_batch(session.inputs(), o.batch, dims);
  runtime::Feeds feeds = make_feeds(session.inputs(), files, dims, o.inputs.seed);
  BenchResult r;
  r.batch = o.batch > 0 ? o.batch : batch_of(feeds);

  {
    Progress progress("warm-up", static_cast<size_t>(o.warmup));
    for (int i = 0; i < o.warmup; ++i) {
      session.run(feeds);
      progress.step();
    }
  }
  std::vector<double> wall_ms, cpu_ms, device_ms;
  const runtime::Executor* ex = session.executor();
  {
    using Clock = std::chrono::steady_clock;
    Progress progress("bench", o.duration > 0 ? 0 : static_cast<size_t>(o.iterations));
    const auto begin = Clock::now();
    for (;;) {
      const double cpu_start = process_cpu_ms();
      const auto start = Clock::now();
      session.run(feeds);
      const auto end = Clock::now();
      cpu_ms.push_back(process_cpu_ms() - cpu_start);
      wall_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
      if (ex && ex->last_device_ms() > 0) device_ms.push_back(ex->last_device_ms());
      r.elapsed_s = std::chrono::duration<double>(end - begin).count();
      progress.step(fmt::format("{:.3f} ms", wall_ms.back()));
      if (wall_ms.size() >= static_cast<size_t>(o.iterations) && r.elapsed_s >= o.duration) break;
    }
  }
  // The threads the session's kernels ran on: the runtime sets them on this thread for a run.
  r.machine = machine_info(backends::cpu_threads());
  r.wall = summarize_timings(wall_ms);
  r.cpu = summarize_timings(cpu_ms);
  if (!device_ms.empty()) r.device = summarize_timings(device_ms);
  if (ex) {
    r.replayed_segments = ex->last_replayed_segments();
    r.replay_segments = ex->replay_segment_count();
  }
  r.throughput =
      static_cast<double>(r.batch) * static_cast<double>(r.wall.count) / (r.wall.total / 1000);
  r.noise = noise_warnings(r.wall);
  if (!r.noise.empty()) {
    std::cerr << fmt::format(
        "kiln: warning: these timings are noisy: {}. Other work competes for the CPUs or the "
        "threads wait by spinning: close other work, give fewer --threads, pin the process "
        "(taskset), run longer (--duration), or shorten the spin (KMP_BLOCKTIME=1; "
        "GOMP_SPINCOUNT=10000 on a libgomp build)\n",
        fmt::join(r.noise, "; "));
  }
  if (o.json) {
    std::cout << to_json(o, feeds, r);
    return kExitOk;
  }
  std::cout << fmt::format("model: {}\n", o.model) << describe_machine(r.machine)
            << describe_feeds(feeds);
  std::cout << fmt::format(
      "batch {}, threads {}, {} warm-up runs, {} timed runs in {:.3f} s (at least {} runs and "
      "{:g} s)\n",
      r.batch,
      o.threads == 0 ? fmt::format("auto ({})", r.machine.threads) : std::to_string(o.threads),
      o.warmup, r.wall.count, r.elapsed_s, o.iterations, o.duration);
  std::cout << "latency ms:  " << stats_line(r.wall) << "\n";
  std::cout << "cpu time ms: " << stats_line(r.cpu) << "\n";
  if (r.device.count > 0) {
    std::cout << "device ms:   " << stats_line(r.device) << "\n";
    std::cout << fmt::format(
        "device work: {} of {} recorded segments replayed (CUDA/HIP graphs) in the last run\n",
        r.replayed_segments, r.replay_segments);
  }
  std::cout << fmt::format(
      "cpu / wall: {:.2f} (CPU time of all threads per second of a run: the cores kept busy, "
      "waiting threads included)\n",
      r.wall.total > 0 ? r.cpu.total / r.wall.total : 0.0);
  std::cout << fmt::format("throughput: {:.2f} inferences/s\n", r.throughput);
  return kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure latency (min/mean/median/p90/p95/p99/max), CPU time and throughput after warm-up "
      "runs; warns when the machine is too noisy to trust them");
  cmd->add_option("model", o->model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  add_input_options(cmd, o->inputs);
  cmd->add_option("--batch", o->batch, "Batch size: dim 0 of every input whose dim 0 is dynamic")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", o->device,
                  "Devices to place nodes on, preferred first: cpu, gpu, gpu,cpu (the CPU runs "
                  "what the others cannot)");
  cmd->add_flag("--no-optimize", o->no_optimize, "ONNX models: run the graph as imported");
  cmd->add_option("--warmup", o->warmup, "Untimed runs first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--iterations", o->iterations, "Timed runs: at least this many")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--duration", o->duration,
                  "Timed runs: for at least this many seconds (0: --iterations alone decides)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the results as JSON (for scripts)");
  return {cmd, [o] { return bench(*o); }};
}

}  // namespace kiln::cli
