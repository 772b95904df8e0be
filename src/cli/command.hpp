#pragma once
// The kiln subcommands, one file each. add_*_command registers a subcommand and its options on the
// app and returns the function that runs it once the command line is parsed. Exit codes, the same
// for every command: 0 success, 1 failure (a kiln::Error, a failed check), 2 usage error (a bad
// flag or value: CLI11's parse errors and UsageError).
#include <functional>
#include <stdexcept>

#include <CLI/CLI.hpp>

namespace kiln::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// A flag value that parses but makes no sense ("--dim batch" without "=N").
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app);
Command add_verify_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_profile_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_compile_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_prune_command(CLI::App& app);

}  // namespace kiln::cli
