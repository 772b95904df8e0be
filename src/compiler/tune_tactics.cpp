#include "compiler/tune_tactics.hpp"

#include <chrono>

#include <fmt/format.h>

namespace kiln::compiler {

TunedTactics tune_tactics(runtime::Executor& prepared, const ir::Graph& graph) {
  TunedTactics out;
  std::vector<RtValue> feeds;
  for (const ir::Value* v : graph.inputs()) {
    if (v->is_constant()) {
      feeds.emplace_back();  // an initializer that is also an input: its own value
      continue;
    }
    const TypeInfo& t = v->type();
    if (t.kind != TypeInfo::Kind::Tensor || !t.shape || !t.shape->is_static()) {
      out.skipped = fmt::format(
          "input '{}' has no static shape: each shape's tactics are timed at its first run",
          v->name());
      return out;
    }
    // Zeros are valid for every input a tuning run meets (indices, masks, lengths); the times
    // measured do not depend on the values.
    feeds.emplace_back(Tensor(t.dtype, t.shape->values("tuning input")));
  }
  const auto start = std::chrono::steady_clock::now();
  prepared.run(feeds);
  out.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.tactics = prepared.tactics();
  return out;
}

}  // namespace kiln::compiler
