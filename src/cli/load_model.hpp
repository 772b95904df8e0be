#pragma once
// Loads what a user hands the kiln command: an ONNX model or a compiled .kiln engine, told
// apart by the file's first bytes, not its name.
#include <optional>
#include <string>

#include "engine/engine_file.hpp"
#include "ir/model.hpp"

namespace kiln::cli {

struct LoadedModel {
  ir::Model model;
  std::optional<engine::EngineInfo> engine;  // set when the file was an engine
};

LoadedModel load_model(const std::string& path);

// The engine stamp, one "key: value" line each, for `kiln inspect` and `kiln compile`.
std::string describe_engine(const engine::EngineInfo& info);

}  // namespace kiln::cli
