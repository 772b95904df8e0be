#include "cli/load_model.hpp"

#include <fmt/format.h>

namespace kiln::cli {

std::string describe_engine(const engine::EngineInfo& info) {
  std::string s = fmt::format("engine format version: {}\nkiln version: {}\ntarget: {}\n",
                              info.format_version, info.kiln_version, info.target.to_string());
  s += fmt::format("source hash: {:016x}\n", info.source_hash);
  if (!info.source_path.empty()) s += fmt::format("source model: {}\n", info.source_path);
  return s;
}

}  // namespace kiln::cli
