#pragma once
// The command line checked before CLI11 parses it, for the mistakes CLI11 reports badly: an
// unknown command ("kiln comple": CLI11 says only that a subcommand is required) and an unknown
// option (CLI11 lists the leftover words, the option's value first). Each is a UsageError that
// names the word, suggests the closest valid one and says where the valid ones are listed.
#include <CLI/CLI.hpp>

namespace kiln::cli {

// Throws UsageError for the first unknown command or option in argv[1..argc); a command line
// CLI11 should parse (or refuse for another reason) passes.
void check_command_line(const CLI::App& app, int argc, const char* const* argv);

}  // namespace kiln::cli
