#pragma once
// Loads what a user hands Kiln: an ONNX model or a compiled .kiln engine, told apart by the file's
// first bytes (an engine header with a damaged magic still counts as an engine), not its name.
#include <optional>
#include <string>
#include <string_view>

#include "engine/engine_file.hpp"
#include "ir/model.hpp"

namespace kiln::runtime {

struct LoadedModel {
  ir::Model model;
  std::optional<engine::EngineInfo> engine;   // set when the file was an engine
  std::optional<engine::ExecutionPlan> plan;  // the engine's stored plan, when it has one
  // With `defer_unpacking`: the engine's weights stored only packed, left for the session to
  // unpack when something other than their packing kernels reads them.
  std::vector<engine::DeferredWeight> deferred;
};

// `defer_unpacking` (engine::ReadOptions): for a Session, which knows who reads what.
LoadedModel load_model(const std::string& path, bool defer_unpacking = false);
// The same from bytes in memory (engines are copied; ONNX bytes may not use external data).
LoadedModel load_model_bytes(std::string_view bytes);

}  // namespace kiln::runtime
