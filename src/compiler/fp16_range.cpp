#include "compiler/fp16_range.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

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

// The gate's first input set (precision_gate.cpp chooses among the same sources in this order).
runtime::Feeds first_input_set(const std::vector<IoInfo>& inputs, const GateInputs& in) {
  if (!in.calibration.empty()) {
    return make_feeds(inputs, {}, {}, in.seed, DimChoice::Min, in.calibration.front());
  }
  if (!in.calibration_npz.empty()) {
    return make_feeds(inputs, {}, {}, in.seed, DimChoice::Min,
                      read_npz(in.calibration_npz.front()));
  }
  if (!in.calibration_dir.empty()) {
    std::vector<runtime::Feeds> sets = read_input_sets(in.calibration_dir, inputs, in.seed);
    if (!sets.empty()) return std::move(sets.front());
  }
  return make_feeds(inputs, in.files, in.dims, in.seed, DimChoice::Min);
}

// Bytes of a value at its declared shape, symbolic dims taken at 1 (the run's low end); 0 when
// unknown.
size_t declared_bytes(const ir::Value* v) {
  const TypeInfo& t = v->type();
  if (!t.shape) return 0;
  double n = 1;
  for (const Dim& d : t.shape->dims()) n *= d.is_static() ? static_cast<double>(d.value()) : 1.0;
  return static_cast<size_t>(n * static_cast<double>(dtype_size(t.dtype)));
}

}  // namespace

Fp16RangeReport measure_fp16_range(std::shared_ptr<ir::Graph> graph, const GateInputs& inputs,
                                   int threads, size_t memory_budget, double timeout_seconds) {
  const auto started = std::chrono::steady_clock::now();
  Fp16RangeReport r;
  // Every float32 value a node writes becomes an output for the one run, so the executor keeps
  // it; the graph's own outputs are restored however the run ends.
  std::vector<ir::Value*> saved = graph->outputs();
  std::vector<ir::Value*> kept;
  size_t bytes = 0;
  for (ir::Node* n : graph->nodes()) {
    for (ir::Value* v : n->outputs()) {
      if (!is_float32_tensor(v) || std::find(saved.begin(), saved.end(), v) != saved.end()) {
        continue;
      }
      kept.push_back(v);
      bytes += declared_bytes(v);
    }
  }
  if (bytes > memory_budget) {
    r.skipped = fmt::format(
        "its float32 values take {:.0f} MiB at the gate's dims, past the {:.0f} MiB the "
        "measurement may keep",
        static_cast<double>(bytes) / (1 << 20), static_cast<double>(memory_budget) / (1 << 20));
    return r;
  }
  struct Restore {
    ir::Graph& g;
    std::vector<ir::Value*> outputs;
    ~Restore() { g.mutable_outputs() = outputs; }
  } restore{*graph, saved};
  for (ir::Value* v : kept) graph->add_output(v);

  // Inputs that are initializers too (older exporters list them) keep their values, as in a
  // session: only the others are fed.
  std::vector<IoInfo> io;
  for (const ir::Value* v : graph->inputs()) {
    if (!v->is_constant()) io.push_back({v->name(), v->type()});
  }
  runtime::Feeds feeds = first_input_set(io, inputs);
  std::vector<RtValue> in_order;
  for (const ir::Value* v : graph->inputs()) {
    auto it = feeds.find(v->name());
    in_order.push_back(it == feeds.end() ? RtValue() : it->second);
  }

  runtime::ExecutorOptions eo;
  eo.threads = threads;
  eo.backends = backends::backends_for("cpu");
  runtime::RunControl control;
  if (timeout_seconds > 0) {
    control.deadline = runtime::deadline_after(runtime::RunClock::now(),
                                               static_cast<uint64_t>(timeout_seconds * 1e6));
  }
  std::vector<RtValue> outs;
  {
    runtime::Executor executor(graph, eo);
    outs = executor.run(in_order, &control);
  }
  const std::vector<ir::Value*>& all = graph->outputs();
  for (size_t i = 0; i < all.size() && i < outs.size(); ++i) {
    if (!is_float32_tensor(all[i]) || !outs[i].is_tensor()) continue;
    const Tensor& t = outs[i].tensor();
    if (t.dtype() != DataType::Float32) continue;
    double largest = 0;
    for (float x : t.values<float>()) {
      // Infinities the float32 model computes itself are no float16 overflow.
      if (std::isfinite(x)) largest = std::max(largest, static_cast<double>(std::fabs(x)));
    }
    if (largest >= kFp16RangeLimit) {
      r.beyond.insert(all[i]->name());
      r.worst.emplace_back(all[i]->name(), largest);
    }
  }
  std::sort(r.worst.begin(), r.worst.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (r.worst.size() > 5) r.worst.resize(5);
  r.ran = true;
  r.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return r;
}

std::string describe_fp16_range(const Fp16RangeReport& r) {
  if (!r.ran) return fmt::format("fp16: range check skipped ({})\n", r.skipped);
  if (r.beyond.empty()) {
    return fmt::format(
        "fp16: range check: every float32 value stays within float16's range "
        "({:.0f} ms)\n",
        r.milliseconds);
  }
  std::string worst;
  for (const auto& [name, value] : r.worst) {
    worst += fmt::format("{}{} {:.3g}", worst.empty() ? "" : ", ", name, value);
  }
  const bool one = r.beyond.size() == 1;
  return fmt::format(
      "fp16: range check: {} float32 value{} {} {:.0f} or more, too close to float16's largest "
      "65504: the nodes reading or writing {} stay float32 (largest: {}; {:.0f} ms)\n",
      r.beyond.size(), one ? "" : "s", one ? "reaches" : "reach", kFp16RangeLimit,
      one ? "it" : "them", worst, r.milliseconds);
}

}  // namespace kiln::compiler
