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
  auto* run_cmd =
      app.add_subcommand("run", "Run a model on the reference interpreter and print its outputs");
  run_cmd->add_option("model", run.model, "ONNX model file")->required()->check(CLI::ExistingFile);
  run_cmd->add_option("-i,--input", run.inputs,
                      "Input NAME=FILE.pb (TensorProto); others are random");
  run_cmd
      ->add_option("-d,--dim", run.dims,
                   "Value of a symbolic dim for random inputs, NAME=N (default 1)")
      ->delimiter(',');
  run_cmd->add_option("--seed", run.seed, "Seed of the random inputs");
  run_cmd->add_option("--repeat", run.repeat, "Run this many times and report the median time")
      ->check(CLI::Range(1, 100000));
  run_cmd->add_flag("--profile", run.profile, "Print time per op type");

  kiln::cli::InspectOptions inspect;
  auto* inspect_cmd =
      app.add_subcommand("inspect", "Show a model's inputs, outputs, ops and parameters");
  inspect_cmd->add_option("model", inspect.model, "ONNX model file")
      ->required()
      ->check(CLI::ExistingFile);
  inspect_cmd->add_flag("--graph", inspect.print_graph, "Print the whole graph as text");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*run_cmd) return kiln::cli::run_command(run);
    if (*inspect_cmd) return kiln::cli::inspect_command(inspect);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
