#include "compiler/observe_values.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backends/backend_registry.hpp"
#include "compiler/feeds.hpp"
#include "compiler/npz.hpp"
#include "runtime/executor.hpp"
#include "runtime/session.hpp"

namespace kiln::compiler {
namespace {

bool is_float32_tensor(const ir::Value* v) {
  return v && v->type().is_tensor() && v->type().dtype == DataType::Float32;
}

// Bytes of a value at its declared shape, symbolic dims taken at 1; 0 when unknown.
size_t declared_bytes(const ir::Value* v) {
  const TypeInfo& t = v->type();
  if (!t.shape) return 0;
  double n = 1;
  for (const Dim& d : t.shape->dims()) n *= d.is_static() ? static_cast<double>(d.value()) : 1.0;
  return static_cast<size_t>(n * static_cast<double>(dtype_size(t.dtype)));
}

}  // namespace

std::vector<runtime::Feeds> input_sets_for(const ir::Graph& graph, const GateInputs& in,
                                           size_t max_sets) {
  // Inputs that are initializers too (older exporters list them) keep their values, as in a
  // session: only the others are fed.
  std::vector<IoInfo> io;
  for (const ir::Value* v : graph.inputs()) {
    if (!v->is_constant()) io.push_back({v->name(), v->type()});
  }
  std::vector<runtime::Feeds> sets;
  auto full = [&] { return max_sets > 0 && sets.size() >= max_sets; };
  for (const runtime::Feeds& given : in.calibration) {
    if (full()) break;
    sets.push_back(make_feeds(io, {}, {}, in.seed, DimChoice::Min, given));
  }
  for (const std::string& path : in.calibration_npz) {
    if (full()) break;
    sets.push_back(make_feeds(io, {}, {}, in.seed, DimChoice::Min, read_npz(path)));
  }
  if (sets.empty() && !in.calibration_dir.empty()) {
    for (runtime::Feeds& f : read_input_sets(in.calibration_dir, io, in.seed)) {
      if (full()) break;
      sets.push_back(std::move(f));
    }
  }
  if (sets.empty()) sets.push_back(make_feeds(io, in.files, in.dims, in.seed, DimChoice::Min));
  return sets;
}

std::string observe_float_values(const std::shared_ptr<ir::Graph>& graph,
                                 const std::vector<runtime::Feeds>& sets, const ObserveOptions& o,
                                 const ValueObserver& observe) {
  std::vector<ir::Value*> saved = graph->outputs();
  std::vector<ir::Value*> kept;
  size_t bytes = 0;
  for (ir::Node* n : graph->nodes()) {
    for (ir::Value* v : n->outputs()) {
      if (!is_float32_tensor(v)) continue;
      bytes += declared_bytes(v);
      if (std::find(saved.begin(), saved.end(), v) == saved.end()) kept.push_back(v);
    }
  }
  if (bytes > o.memory_budget) {
    return fmt::format(
        "its float32 values take {:.0f} MiB at these dims, past the {:.0f} MiB one "
        "run may keep",
        static_cast<double>(bytes) / (1 << 20), static_cast<double>(o.memory_budget) / (1 << 20));
  }
  struct Restore {
    ir::Graph& g;
    std::vector<ir::Value*> outputs;
    ~Restore() { g.mutable_outputs() = outputs; }
  } restore{*graph, saved};
  for (ir::Value* v : kept) graph->add_output(v);

  runtime::ExecutorOptions eo;
  eo.threads = o.threads;
  eo.backends = backends::backends_for("cpu");
  runtime::Executor executor(graph, eo);
  const std::vector<ir::Value*>& all = graph->outputs();
  for (size_t s = 0; s < sets.size(); ++s) {
    std::vector<RtValue> in_order;
    for (const ir::Value* v : graph->inputs()) {
      auto it = sets[s].find(v->name());
      in_order.push_back(it == sets[s].end() ? RtValue() : it->second);
    }
    runtime::RunControl control;
    if (o.timeout_seconds > 0) {
      control.deadline = runtime::deadline_after(runtime::RunClock::now(),
                                                 static_cast<uint64_t>(o.timeout_seconds * 1e6));
    }
    std::vector<RtValue> outs = executor.run(in_order, &control);
    for (size_t i = 0; i < all.size() && i < outs.size(); ++i) {
      if (!is_float32_tensor(all[i]) || !outs[i].is_tensor()) continue;
      const Tensor& t = outs[i].tensor();
      if (t.dtype() == DataType::Float32) observe(*all[i], t, s);
    }
  }
  return "";
}

}  // namespace kiln::compiler
