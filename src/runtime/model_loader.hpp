#pragma once
// Loads what a user hands Kiln: an ONNX model or a compiled .kiln engine, told apart by the file's
// first bytes, not its name.
#include <optional>
#include <string>

#include "engine/engine_file.hpp"
#include "ir/model.hpp"

namespace kiln::runtime {

struct LoadedModel {
  ir::Model model;
  std::optional<engine::EngineInfo> engine;   // set when the file was an engine
  std::optional<engine::ExecutionPlan> plan;  // the engine's stored plan, when it has one
};

LoadedModel load_model(const std::string& path);

}  // namespace kiln::runtime
