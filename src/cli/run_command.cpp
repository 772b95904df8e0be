// `kiln run`: run a model (ONNX or engine) through kiln::Session and print or save its outputs.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/tensor_files.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {
namespace {

struct RunOptions {
  std::string model;
  InputOptions inputs;
  int repeat = 1;
  bool profile = false;
  bool no_optimize = false;
  int threads = 0;
  std::string device = "cpu";
  std::string output_dir;
};

std::string summarize(const Tensor& t) {
  std::string s = t.describe();
  if (t.numel() == 0 || t.dtype() == DataType::String) return s;
  double lo = t.double_at(0), hi = lo, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = t.double_at(i);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  s += fmt::format("  min {:.6g} max {:.6g} mean {:.6g}  [", lo, hi,
                   sum / static_cast<double>(t.numel()));
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i) {
    s += fmt::format("{}{:.6g}", i ? ", " : "", t.double_at(i));
  }
  return s + (t.numel() > 6 ? ", ...]" : "]");
}

int run(const RunOptions& o) {
  auto files = o.inputs.file_map();
  auto dims = o.inputs.dims();
  SessionOptions so;
  so.profiling = o.profile;
  so.optimize = !o.no_optimize;
  so.threads = o.threads;
  so.device = o.device;
  Session session(o.model, so);
  runtime::Feeds feeds = make_feeds(session.inputs(), files, dims, o.inputs.seed);
  std::cout << describe_feeds(feeds);

  std::vector<double> times;
  std::map<std::string, RtValue> outputs;
  std::map<std::string, double> per_op;
  for (int r = 0; r < o.repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    outputs = session.run(feeds);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    for (const auto& t : session.last_profile()) per_op[t.node->op_type()] += t.microseconds;
  }
  std::vector<std::string> names;
  for (const IoInfo& out : session.outputs()) {
    const RtValue& r = outputs.at(out.name);
    std::cout << "output " << out.name << ": "
              << (r.is_tensor() ? summarize(r.tensor()) : r.describe()) << "\n";
    names.push_back(out.name);
  }
  if (!o.output_dir.empty()) {
    for (const std::string& path : write_values(names, outputs, o.output_dir))
      std::cout << "wrote " << path << "\n";
  }
  std::sort(times.begin(), times.end());
  std::cout << fmt::format("time: {:.3f} ms (median of {})\n", times[times.size() / 2],
                           times.size());
  if (o.profile) {
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto& [op, us] : per_op) sorted.emplace_back(us / o.repeat, op);
    std::sort(sorted.rbegin(), sorted.rend());
    std::cout << "time per op type (mean per run):\n";
    for (const auto& [us, op] : sorted) std::cout << fmt::format("  {:<24} {:10.1f} us\n", op, us);
  }
  return kExitOk;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a model (ONNX or .kiln engine) and print its outputs; --output-dir saves them");
  cmd->add_option("model", o->model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  add_input_options(cmd, o->inputs);
  cmd->add_option("--repeat", o->repeat, "Run this many times and report the median time")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--profile", o->profile, "Print time per op type");
  cmd->add_option("--output-dir", o->output_dir,
                  "Write each output to DIR/NAME.pb (TensorProto, name inside)");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", o->device,
                  "Devices to place nodes on, preferred first: cpu, gpu, gpu,cpu (the CPU runs "
                  "what the others cannot)");
  cmd->add_flag("--no-optimize", o->no_optimize, "ONNX models: run the graph as imported");
  return {cmd, [o] { return run(*o); }};
}

}  // namespace kiln::cli
