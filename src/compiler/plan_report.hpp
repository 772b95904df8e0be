#pragma once
// What the compile report says about a prepared model and a written engine: the memory plan, the
// kernels chosen, the nodes left on reference kernels with their share of the FLOPs, and the
// engine's stamp.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_file.hpp"
#include "runtime/executor.hpp"

namespace kiln::compiler {

// A node no fast kernel took.
struct FallbackNode {
  std::string op_type;
  std::string name;    // the node's name, or its label when it has none
  double flops = 0;    // symbolic dims at the low end of their range
  std::string reason;  // why, as the CPU backend says
};

struct PlanSummary {
  std::map<std::string, size_t> kernels;  // "cpu:conv2d" -> nodes
  size_t nodes = 0;
  std::vector<FallbackNode> fallbacks;  // most FLOPs first
  double total_flops = 0;
  double fallback_flops = 0;
};

PlanSummary summarize_plan(const runtime::Executor& prepared);

// "activation memory: ..." per arena, "kernels: ..." and the reference-kernel nodes (the first
// 20 by FLOPs, the rest counted).
std::string describe_execution_plan(const runtime::Executor& prepared, const PlanSummary& summary);

// The engine stamp, one "key: value" line each, for `kiln inspect` and the compile report.
std::string describe_engine(const engine::EngineInfo& info);

}  // namespace kiln::compiler
