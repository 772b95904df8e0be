// `kiln compile`: the flags of the compiler library's compile_model (compiler/compile.hpp), and
// its report printed as it comes: ONNX in, optimized engine file out, kept only when it passes
// the precision gate.
#include <iostream>
#include <map>
#include <memory>

#include "cli/command.hpp"
#include "cli/fp16.hpp"
#include "cli/inputs.hpp"
#include "cli/precision_options.hpp"
#include "cli/progress.hpp"
#include "compiler/compile.hpp"

namespace kiln::cli {
namespace {

struct CompileFlags {
  std::string model;
  std::string output;  // default: the model's path with extension .kiln
  bool no_optimize = false;
  bool no_prepack = false;
  std::string dump_after;
  bool trace_passes = false;
  std::string target;
  std::string device = "cpu";
  std::vector<std::string> shapes;
  bool no_verify = false;
  bool allow_drift = false;
  double verify_timeout = 60;
  bool verify_full = false;
  std::string calibration_dir;
  InputOptions inputs;
  ToleranceOptions tolerance;
  Fp16Options fp16;
};

void add_gate_flags(CLI::App* cmd, CompileFlags& o) {
  auto* skip = cmd->add_flag("--no-verify", o.no_verify,
                             "Skip the precision gate (the engine is written unchecked)");
  auto* allow = cmd->add_flag("--allow-drift", o.allow_drift,
                              "Write the engine even when its outputs drift (with a warning)");
  skip->excludes(allow);
  cmd->add_option("--calibration-inputs", o.calibration_dir,
                  "Check on these inputs: a directory of NAME.pb files, or of subdirectories of "
                  "them (one input set each)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--verify-timeout", o.verify_timeout,
                  "Seconds the precision gate may take before it stops with an error (0: no "
                  "limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_flag("--verify-full", o.verify_full,
                "Compare the top of the dim ranges with the reference interpreter however long "
                "it takes (by default a costly top runs on the engine alone)")
      ->excludes(skip);
  add_input_options(cmd, o.inputs);
  add_tolerance_options(cmd, o.tolerance);
}

compiler::CompileOptions library_options(const CompileFlags& f) {
  compiler::CompileOptions o;
  o.model_path = f.model;
  o.output_path = f.output;
  o.shapes = f.shapes;
  o.optimize = !f.no_optimize;
  o.dump_after = f.dump_after;
  o.trace_passes = f.trace_passes;
  o.fp16 = f.fp16;
  o.prepack = !f.no_prepack;
  o.target = f.target;
  o.device = f.device;
  o.verify = !f.no_verify;
  o.allow_drift = f.allow_drift;
  const ToleranceOptions& t = f.tolerance;
  if (t.max_rel_l2_option && t.max_rel_l2_option->count()) o.max_rel_l2 = t.max_rel_l2;
  if (t.rtol_option && t.rtol_option->count()) o.rtol = t.rtol;
  if (t.atol_option && t.atol_option->count()) o.atol = t.atol;
  o.verify_timeout_seconds = f.verify_timeout;
  o.verify_full = f.verify_full;
  o.inputs.calibration_dir = f.calibration_dir;
  if (o.verify) {  // the gate's flags, read only when it runs
    o.inputs.files = f.inputs.file_map();
    o.inputs.dims = f.inputs.dims();
  }
  o.inputs.seed = f.inputs.seed;
  return o;
}

int compile(const CompileFlags& flags) {
  compiler::CompileOptions o = library_options(flags);
  o.on_message = [](compiler::MessageKind kind, std::string_view text) {
    switch (kind) {
      case compiler::MessageKind::Report:
      case compiler::MessageKind::Trace:
        std::cout << text;
        break;
      case compiler::MessageKind::Note:
        std::cerr << "kiln: " << text;
        break;
      case compiler::MessageKind::Warning:
        std::cerr << "kiln: warning: " << text;
        break;
    }
  };
  // One bar per long step, on a terminal only.
  std::map<std::string, std::unique_ptr<Progress>, std::less<>> bars;
  if (Progress::enabled()) {
    o.on_progress = [&bars](const compiler::ProgressEvent& e) {
      if (e.finished) {
        bars.erase(std::string(e.stage));
        return;
      }
      auto it = bars.find(e.stage);
      if (it == bars.end())
        it = bars.emplace(std::string(e.stage),
                          std::make_unique<Progress>(std::string(e.stage), e.total))
                 .first;
      it->second->update(e.done, e.detail);
    };
  }
  compiler::compile_model(o);
  return kExitOk;
}

}  // namespace

Command add_compile_command(CLI::App& app) {
  auto o = std::make_shared<CompileFlags>();
  CLI::App* cmd = app.add_subcommand(
      "compile",
      "Optimize an ONNX model and write it as a .kiln engine file, checked by the precision gate");
  cmd->add_option("model", o->model, "ONNX model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->output,
                  "Engine file to write (default: the model's name with .kiln)");
  cmd->add_flag("--no-optimize", o->no_optimize, "Skip the graph passes");
  cmd->add_flag("--no-prepack", o->no_prepack,
                "Store weights only plain (kernels pack them when it opens)");
  cmd->add_option("--shape,--shape-range", o->shapes,
                  "Input dims, fixed or as ranges: NAME:1x3x224x224 or NAME:1..64x3x224x224");
  cmd->add_option("--dump-after", o->dump_after, "Print the graph after the pass of this name");
  cmd->add_flag("--trace-passes", o->trace_passes, "Print one line per pass run");
  cmd->add_option("--target", o->target,
                  "Target to stamp, DEVICE[:FEATURE,...] (default: portable CPU)");
  cmd->add_option("--device", o->device,
                  "Devices the engine is made for: cpu, gpu, gpu,cpu (their fusions, kernel "
                  "choices and memory plan; the precision gate runs there)");
  add_gate_flags(cmd, *o);
  add_fp16_options(cmd, o->fp16);
  return {cmd, [o] { return compile(*o); }};
}

}  // namespace kiln::cli
