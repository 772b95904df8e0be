// kiln: the command-line driver.
#include <iostream>
#include <string_view>
#include <vector>

#include "cli/command.hpp"
#include "cli/serve_command.hpp"
#include "cli/usage_check.hpp"
#include "compiler/option_error.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  using namespace kiln::cli;
  // `kiln serve` hands its flags, tritonserver's names, to the kiln-serve program unparsed.
  if (argc >= 2 && std::string_view(argv[1]) == "serve") return serve_command(argc - 1, argv + 1);
  CLI::App app{"Kiln: compile, verify, benchmark and run ONNX models"};
  app.set_version_flag("--version", KILN_VERSION);
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 1 failure, 2 usage error. `kiln COMMAND --help` for more.");

  std::vector<Command> commands = {
      add_compile_command(app), add_run_command(app),      add_verify_command(app),
      add_bench_command(app),   add_profile_command(app),  add_inspect_command(app),
      add_devices_command(app), add_quantize_command(app), add_prune_command(app),
  };
  // Listed in the help and known to the command check; the words after it never reach CLI11
  // (above), kiln-serve parses them.
  app.add_subcommand("serve",
                     "Run the inference server (kiln-serve: KServe v2 HTTP/gRPC, tritonserver's "
                     "flags; `kiln serve --help` lists them)")
      ->prefix_command()
      ->allow_extras();
  try {
    check_command_line(app, argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  try {
    for (const Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const UsageError& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return kExitUsage;
  } catch (const kiln::compiler::OptionError& e) {  // a flag's value the model cannot take
    std::cerr << "kiln: " << e.message() << "\n";
    return kExitUsage;
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}
