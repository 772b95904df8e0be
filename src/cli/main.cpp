// kiln: the command-line driver.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Kiln: compile, run and serve ONNX models"};
  app.set_version_flag("--version", KILN_VERSION);
  app.require_subcommand(1);

  kiln::cli::RunOptions run;
  std::vector<std::string> dim_specs;  // NAME=N; CLI11 maps want "NAME N", not what users type
  auto* run_cmd =
      app.add_subcommand("run", "Run a model on the reference interpreter and print its outputs");
  run_cmd->add_option("model", run.model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  run_cmd->add_option("-i,--input", run.inputs,
                      "Input NAME=FILE.pb (TensorProto); others are random");
  run_cmd
      ->add_option("-d,--dim", dim_specs,
                   "Value of a symbolic dim for random inputs, NAME=N (default 1)")
      ->delimiter(',');
  run_cmd->add_option("--seed", run.seed, "Seed of the random inputs");
  run_cmd->add_option("--repeat", run.repeat, "Run this many times and report the median time")
      ->check(CLI::Range(1, 100000));
  run_cmd->add_flag("--profile", run.profile, "Print time per op type");

  kiln::cli::InspectOptions inspect;
  auto* inspect_cmd =
      app.add_subcommand("inspect", "Show a model's inputs, outputs, ops and parameters");
  inspect_cmd->add_option("model", inspect.model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  inspect_cmd->add_flag("--graph", inspect.print_graph, "Print the whole graph as text");

  kiln::cli::CompileOptions compile;
  auto* compile_cmd =
      app.add_subcommand("compile", "Optimize an ONNX model and write it as a .kiln engine file");
  compile_cmd->add_option("model", compile.model, "ONNX model file")
      ->required()
      ->check(CLI::ExistingFile);
  compile_cmd->add_option("-o,--output", compile.output,
                          "Engine file to write (default: the model's name with .kiln)");
  compile_cmd->add_flag("--no-optimize", compile.no_optimize, "Skip the graph passes");
  compile_cmd->add_option(
      "--shape,--shape-range", compile.shapes,
      "Input dims, fixed or as ranges: NAME:1x3x224x224 or NAME:1..64x3x224x224");
  compile_cmd->add_option("--dump-after", compile.dump_after,
                          "Print the graph after the pass of this name");
  compile_cmd->add_flag("--trace-passes", compile.trace_passes, "Print one line per pass run");
  compile_cmd->add_option("--target", compile.target,
                          "Target to stamp, DEVICE[:FEATURE,...] (default: portable CPU)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (const std::string& spec : dim_specs) {
    size_t eq = spec.find('=');
    size_t used = 0;
    try {
      if (eq != std::string::npos)
        run.dims[spec.substr(0, eq)] = std::stoll(spec.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || eq == 0 || used == 0 || eq + 1 + used != spec.size()) {
      std::cerr << "kiln: --dim '" << spec << "' must be NAME=N\n";
      return 2;
    }
  }
  try {
    if (*run_cmd) return kiln::cli::run_command(run);
    if (*inspect_cmd) return kiln::cli::inspect_command(inspect);
    if (*compile_cmd) return kiln::cli::compile_command(compile);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
