#include "cli/usage_check.hpp"

#include <cctype>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "core/closest_name.hpp"

namespace kiln::cli {
namespace {

// "--name" and "-n" for every option of `app` (help included).
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

// The option a word spells ("--dim=a=1" -> "--dim", "-ofile" -> "-o"), "" when the word is a
// value: not dashed, a negative number ("-1", "-.5"), or a lone "-".
std::string option_of(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return "";
  if (word[1] == '-') return word.substr(0, word.find('='));
  if (!std::isalpha(static_cast<unsigned char>(word[1]))) return "";
  return word.substr(0, 2);
}

bool is_known(const std::vector<std::string>& names, const std::string& name) {
  for (const std::string& n : names) {
    if (n == name) return true;
  }
  return false;
}

void check_options(const CLI::App& app, const std::string& where, const std::string& word) {
  std::string name = option_of(word);
  if (name.empty()) return;
  std::vector<std::string> names = option_names(app);
  if (is_known(names, name)) return;
  throw UsageError(fmt::format("unknown option '{}' for '{}'{} (`{} --help` lists them)", name,
                               where, did_you_mean(name, names), where));
}

}  // namespace

void check_command_line(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* command = nullptr;
  std::string where = "kiln";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;  // everything after is a value
    if (!command && option_of(word).empty()) {
      // The first word that is not an option names the command (kiln itself takes no values).
      std::vector<std::string> commands = command_names(app);
      for (const CLI::App* sub : app.get_subcommands({})) {
        if (sub->get_name() == word) command = sub;
      }
      if (!command)
        throw UsageError(fmt::format("unknown command '{}'{} (commands: {})", word,
                                     did_you_mean(word, commands), quoted_list(commands)));
      // A command that hands its words on unparsed (serve) checks them itself.
      if (command->get_prefix_command()) return;
      where = "kiln " + word;
      continue;
    }
    check_options(command ? *command : app, where, word);
  }
  if (!command) {
    // Nothing to run: unless help or the version was asked for, say what can be run.
    for (int i = 1; i < argc; ++i) {
      std::string name = option_of(argv[i]);
      if (name == "-h" || name == "--help" || name == "--version") return;
    }
    throw UsageError(fmt::format("a command is required: {} (`kiln --help` describes them)",
                                 quoted_list(command_names(app))));
  }
}

}  // namespace kiln::cli
