#pragma once
#include <string>

#include "compiler/plan_report.hpp"
#include "engine/engine_file.hpp"
#include "runtime/model_loader.hpp"

namespace kiln::cli {

using runtime::load_model;
using runtime::LoadedModel;

// The engine stamp, one "key: value" line each, for `kiln inspect` and `kiln compile`.
using compiler::describe_engine;

}  // namespace kiln::cli
