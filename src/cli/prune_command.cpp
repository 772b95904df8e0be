// `kiln prune`: the flags of the compiler library's prune_model (compiler/prune.hpp): an ONNX
// model in, a pruned ONNX model out (masked, or smaller and dense for channel pruning), kept only
// when it passes the task metric on the given inputs.
#include <iostream>
#include <memory>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "compiler/prune.hpp"

namespace kiln::cli {
namespace {

struct PruneFlags {
  std::string model;
  std::string output;
  std::string method = "channels";
  double ratio = 0.5;
  bool global = false;
  std::string criterion = "l1";
  int64_t channel_multiple = 1;
  bool no_bias_compensation = false;
  bool no_residual_groups = false;
  std::vector<std::string> layer_ratios;
  std::vector<std::string> ops = {"Conv", "MatMul", "Gemm"};
  std::vector<std::string> exclude;
  bool search = false;
  int search_steps = 4;
  std::string calibration_dir;
  std::vector<std::string> calibration_npz;
  double min_cosine = 0.99;
  double min_top1 = -1;
  bool allow_drift = false;
  int threads = 0;
  double run_timeout = 600;
  InputOptions inputs;
};

// "NAME=0.25" (the name may itself hold '=': the last one splits).
std::pair<std::string, double> parse_layer_ratio(const std::string& s) {
  const size_t eq = s.rfind('=');
  if (eq == std::string::npos || eq == 0) {
    throw UsageError("--layer-ratio takes NAME=RATIO, got '" + s + "'");
  }
  try {
    size_t used = 0;
    const double r = std::stod(s.substr(eq + 1), &used);
    if (used != s.size() - eq - 1) throw std::invalid_argument(s);
    return {s.substr(0, eq), r};
  } catch (const std::logic_error&) {
    throw UsageError("--layer-ratio takes NAME=RATIO, got '" + s + "'");
  }
}

int prune(const PruneFlags& f) {
  compiler::PruneOptions o;
  o.model_path = f.model;
  o.output_path = f.output;
  o.method = f.method == "magnitude" ? compiler::PruneMethod::Magnitude
             : f.method == "2:4"     ? compiler::PruneMethod::TwoFour
                                     : compiler::PruneMethod::Channels;
  o.ratio = f.ratio;
  o.global = f.global;
  o.criterion = f.criterion == "l2"             ? compiler::ChannelCriterion::L2
                : f.criterion == "bn-gamma"     ? compiler::ChannelCriterion::BatchNormGamma
                : f.criterion == "contribution" ? compiler::ChannelCriterion::Contribution
                                                : compiler::ChannelCriterion::L1;
  o.channel_multiple = f.channel_multiple;
  o.bias_compensation = !f.no_bias_compensation;
  o.residual_groups = !f.no_residual_groups;
  for (const std::string& s : f.layer_ratios) o.layer_ratios.insert(parse_layer_ratio(s));
  o.op_types = f.ops;
  o.exclude_nodes = f.exclude;
  o.search = f.search;
  o.search_steps = f.search_steps;
  o.calibration.calibration_dir = f.calibration_dir;
  o.calibration.calibration_npz = f.calibration_npz;
  o.calibration.files = f.inputs.file_map();
  o.calibration.dims = f.inputs.dims();
  o.calibration.seed = f.inputs.seed;
  o.min_cosine = f.min_cosine;
  if (f.min_top1 >= 0) o.min_top1 = f.min_top1;
  o.allow_drift = f.allow_drift;
  o.threads = f.threads;
  o.run_timeout_seconds = f.run_timeout;
  o.on_report = [](std::string_view line) { std::cout << line; };
  const compiler::PruneResult r = compiler::prune_model(o);
  if (!r.pass) std::cerr << "kiln: warning: prune gate: " << r.failure << " (--allow-drift)\n";
  return kExitOk;
}

}  // namespace

Command add_prune_command(CLI::App& app) {
  auto o = std::make_shared<PruneFlags>();
  CLI::App* cmd = app.add_subcommand(
      "prune",
      "Prune an ONNX model: magnitude or 2:4 masks, or whole output channels removed (a smaller "
      "dense model), checked on a task metric (docs/PRUNING.md)");
  cmd->add_option("model", o->model, "ONNX model file (float32)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->output, "Pruned ONNX model to write")->required();
  cmd->add_option("--method", o->method,
                  "channels (remove output channels), magnitude (zero the smallest weights) or "
                  "2:4 (2 of every 4 along the reduction axis)")
      ->check(CLI::IsMember({"channels", "magnitude", "2:4"}))
      ->capture_default_str();
  cmd->add_option("--ratio", o->ratio,
                  "Share removed: of each layer's output channels (channels, < 1) or weights "
                  "(magnitude); with --search, the largest ratio tried")
      ->capture_default_str();
  cmd->add_flag("--global", o->global,
                "magnitude: one threshold over every layer's weights instead of each layer's own");
  cmd->add_option(
         "--criterion", o->criterion,
         "channels: rank output channels by their filter's l1 or l2 norm, or by the "
         "|gamma| of the BatchNormalization after them (bn-gamma), or by their contribution: "
         "the channel's standard deviation on the input sets times its readers' weight "
         "norm (contribution)")
      ->check(CLI::IsMember({"l1", "l2", "bn-gamma", "contribution"}))
      ->capture_default_str();
  cmd->add_option("--channel-multiple", o->channel_multiple,
                  "channels: round each layer's kept channel count up to a multiple of this")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--no-bias-compensation", o->no_bias_compensation,
                "channels: do not fold the removed channels' mean contribution (measured on the "
                "input sets) into their readers' biases");
  cmd->add_flag("--no-residual-groups", o->no_residual_groups,
                "channels: leave layers whose channels meet at residual Adds alone (default: "
                "prune the same channels on every joined branch)");
  cmd->add_option("--layer-ratio", o->layer_ratios,
                  "NAME=RATIO: this layer's own ratio (repeatable)");
  cmd->add_option("--ops", o->ops, "Op types to prune (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--exclude-node", o->exclude, "Leave this layer unpruned (repeatable)");
  cmd->add_flag("--search", o->search,
                "Find each layer's largest ratio (up to --ratio) that passes the gate with it "
                "alone pruned, then step the most sensitive back until all together pass");
  cmd->add_option("--search-steps", o->search_steps,
                  "--search tries ratio * i / steps for i = 1..steps")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--calibration-inputs", o->calibration_dir,
                  "Gate on these inputs: a directory of NAME.pb files, or of subdirectories of "
                  "them (one input set each)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--calibration-npz", o->calibration_npz,
                  "Gate on a numpy .npz file of named inputs (one input set each; repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--min-cosine", o->min_cosine,
                  "The gate: each output's cosine similarity to the float model's, at least")
      ->check(CLI::Range(-1.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--min-top1", o->min_top1,
                  "The gate: for [N, classes] outputs, the share of rows whose top-1 class agrees "
                  "with the float model's, at least")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--allow-drift", o->allow_drift,
                "Write the model even when it misses the gate (with a warning)");
  cmd->add_option("--run-timeout", o->run_timeout,
                  "Seconds one gate run of the model may take (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Intra-op threads of the gate runs (0: one per core)");
  add_input_options(cmd, o->inputs);
  return {cmd, [o] { return prune(*o); }};
}

}  // namespace kiln::cli
