#include "cli/load_model.hpp"

#include <fmt/format.h>

#include "onnx/onnx_io.hpp"

namespace kiln::cli {

LoadedModel load_model(const std::string& path) {
  LoadedModel out;
  if (engine::is_engine_file(path)) {
    engine::LoadedEngine e = engine::read_engine(path);
    out.model = std::move(e.model);
    out.engine = std::move(e.info);
  } else {
    out.model = onnx_io::import_model_file(path);
  }
  return out;
}

std::string describe_engine(const engine::EngineInfo& info) {
  std::string s = fmt::format("engine format version: {}\nkiln version: {}\ntarget: {}\n",
                              info.format_version, info.kiln_version, info.target.to_string());
  s += fmt::format("source hash: {:016x}\n", info.source_hash);
  if (!info.source_path.empty()) s += fmt::format("source model: {}\n", info.source_path);
  return s;
}

}  // namespace kiln::cli
