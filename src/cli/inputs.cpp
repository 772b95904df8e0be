#include "cli/inputs.hpp"

#include <fmt/format.h>

#include "cli/command.hpp"

namespace kiln::cli {
namespace {

std::pair<std::string, std::string> split_spec(const std::string& spec, const char* flag,
                                               const char* form) {
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw UsageError(fmt::format("{} '{}' must be {}", flag, spec, form));
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

}  // namespace

std::map<std::string, std::string> InputOptions::file_map() const {
  std::map<std::string, std::string> out;
  for (const std::string& spec : files) {
    auto [name, path] = split_spec(spec, "--input", "NAME=FILE.pb");
    if (!out.emplace(name, path).second)
      throw UsageError(fmt::format("--input gives '{}' twice", name));
  }
  return out;
}

std::map<std::string, int64_t> InputOptions::dims() const {
  std::map<std::string, int64_t> out;
  for (const std::string& spec : dim_specs) {
    auto [name, text] = split_spec(spec, "--dim", "NAME=N with N >= 0");
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || v < 0)
      throw UsageError(fmt::format("--dim '{}' must be NAME=N with N >= 0", spec));
    out[name] = v;
  }
  return out;
}

void add_input_options(CLI::App* cmd, InputOptions& o) {
  cmd->add_option("-i,--input", o.files,
                  "Input NAME=FILE.pb (a TensorProto); inputs not given get seeded random data");
  cmd->add_option("-d,--dim", o.dim_specs,
                  "Value of a symbolic dim for random inputs, NAME=N (default: the low end of "
                  "its range, at least 1)")
      ->delimiter(',');
  cmd->add_option("--seed", o.seed, "Seed of the random inputs")->capture_default_str();
}

std::string describe_feeds(const runtime::Feeds& feeds) {
  std::string s;
  for (const auto& [name, v] : feeds) s += fmt::format("input  {}: {}\n", name, v.describe());
  return s;
}

}  // namespace kiln::cli
