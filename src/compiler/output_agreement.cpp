#include "compiler/output_agreement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "backends/backend_registry.hpp"
#include "core/error.hpp"
#include "runtime/executor.hpp"
#include "runtime/run_control.hpp"

namespace kiln::compiler {
namespace {

// Cosine similarity accumulated over several tensors.
struct Cosine {
  double dot = 0, aa = 0, bb = 0;
  void add(std::span<const float> a, std::span<const float> b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      dot += double(a[i]) * b[i];
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
    }
  }
  double value() const {
    if (aa == 0 && bb == 0) return 1;
    return aa > 0 && bb > 0 ? dot / std::sqrt(aa * bb) : 0;
  }
};

// Runs `graph` on every set with one executor, its own outputs only (a search scores many
// candidates: keeping every intermediate value, as observe_float_values does, would cost more
// than the run).
void run_outputs(const std::shared_ptr<ir::Graph>& graph, const std::vector<runtime::Feeds>& sets,
                 const ObserveOptions& o, const ValueObserver& observe) {
  runtime::ExecutorOptions eo;
  eo.threads = o.threads;
  eo.backends = backends::backends_for("cpu");
  runtime::Executor executor(graph, eo);
  const std::vector<ir::Value*>& outputs = graph->outputs();
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
    for (size_t i = 0; i < outputs.size() && i < outs.size(); ++i) {
      if (outs[i].is_tensor() && outs[i].tensor().dtype() == DataType::Float32) {
        observe(*outputs[i], outs[i].tensor(), s);
      }
    }
  }
}

// Every set through `graph`: its outputs only, or every float value when `all_values`.
void run_sets(const std::shared_ptr<ir::Graph>& graph, const std::vector<runtime::Feeds>& sets,
              const ObserveOptions& o, bool all_values, const ValueObserver& observe) {
  if (!all_values) return run_outputs(graph, sets, o, observe);
  const std::string skipped = observe_float_values(graph, sets, o, observe);
  KILN_CHECK_ARG(skipped.empty(), "the model cannot run for the gate: {}", skipped);
}

}  // namespace

FloatReference::FloatReference(std::shared_ptr<ir::Graph> float_graph,
                               std::vector<runtime::Feeds> sets, ObserveOptions options)
    : float_graph_(std::move(float_graph)), sets_(std::move(sets)), options_(options) {
  outputs_.resize(sets_.size());
  run_outputs(float_graph_, sets_, options_, [&](const ir::Value& v, const Tensor& data, size_t s) {
    outputs_[s][v.name()] = data.clone();
  });
}

Agreement FloatReference::score(const std::shared_ptr<ir::Graph>& candidate,
                                const std::map<std::string, std::string>& watched,
                                const AgreementThresholds& th) const {
  std::map<std::string, Cosine> node_cos, out_cos;
  std::map<std::string, std::pair<size_t, size_t>> top1;  // agreeing rows, rows
  // The float model's watched values, every set's (they are few: the pruned layers' readers).
  std::vector<std::map<std::string, Tensor>> reference = outputs_;
  if (!watched.empty()) {
    run_sets(float_graph_, sets_, options_, true,
             [&](const ir::Value& v, const Tensor& data, size_t s) {
               if (watched.count(v.name())) reference[s][v.name()] = data.clone();
             });
  }
  run_sets(candidate, sets_, options_, !watched.empty(),
           [&](const ir::Value& v, const Tensor& data, size_t s) {
             auto ref = reference[s].find(v.name());
             if (ref == reference[s].end()) return;
             std::span<const float> a = ref->second.values<float>();
             std::span<const float> b = data.values<float>();
             if (a.size() != b.size()) return;  // a pruned value: other channels, not comparable
             if (auto w = watched.find(v.name()); w != watched.end()) node_cos[w->second].add(a, b);
             if (!outputs_[s].count(v.name())) return;
             out_cos[v.name()].add(a, b);
             const std::vector<int64_t>& d = data.dims();
             if (d.size() == 2 && d[1] > 1) {
               auto& [agree, rows] = top1[v.name()];
               for (int64_t row = 0; row < d[0]; ++row) {
                 const float* x = a.data() + row * d[1];
                 const float* y = b.data() + row * d[1];
                 agree += std::max_element(x, x + d[1]) - x == std::max_element(y, y + d[1]) - y;
                 ++rows;
               }
             }
           });
  Agreement r;
  for (const ir::Value* v : float_graph_->outputs()) {
    auto c = out_cos.find(v->name());
    if (c == out_cos.end()) continue;
    OutputScore score{v->name(), c->second.value(), std::nullopt};
    if (auto it = top1.find(v->name()); it != top1.end() && it->second.second > 0) {
      score.top1 = static_cast<double>(it->second.first) / static_cast<double>(it->second.second);
    }
    r.outputs.push_back(score);
  }
  for (const auto& [name, c] : node_cos) r.worst_nodes.emplace_back(name, c.value());
  std::sort(r.worst_nodes.begin(), r.worst_nodes.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  if (r.worst_nodes.size() > 5) r.worst_nodes.resize(5);
  std::string worst;
  for (const auto& [name, c] : r.worst_nodes) {
    worst += fmt::format("{}{} {:.4f}", worst.empty() ? "" : ", ", name, c);
  }
  for (const OutputScore& s : r.outputs) {
    const bool cos_ok = s.cosine >= th.min_cosine;
    const bool top1_ok = !th.min_top1 || !s.top1 || *s.top1 >= *th.min_top1;
    if ((!cos_ok || !top1_ok) && r.pass) {
      r.pass = false;
      r.failure = fmt::format(
          "output '{}' {} (cosine {:.5f}{}){}", s.name,
          !cos_ok ? fmt::format("has cosine below {}", th.min_cosine)
                  : fmt::format("has top-1 agreement below {}", *th.min_top1),
          s.cosine, s.top1 ? fmt::format(", top-1 {:.4f}", *s.top1) : "",
          worst.empty() ? "" : fmt::format("; the changed layers that drift most: {}", worst));
    }
  }
  return r;
}

std::string describe_score(const OutputScore& s, const AgreementThresholds& th) {
  const bool cos_ok = s.cosine >= th.min_cosine;
  const bool top1_ok = !th.min_top1 || !s.top1 || *s.top1 >= *th.min_top1;
  return fmt::format("output '{}': cosine {:.5f} (>= {}){}{}", s.name, s.cosine, th.min_cosine,
                     s.top1 ? fmt::format(", top-1 agreement {:.4f}{}", *s.top1,
                                          th.min_top1 ? fmt::format(" (>= {})", *th.min_top1) : "")
                            : "",
                     cos_ok && top1_ok ? "" : "  FAIL");
}

}  // namespace kiln::compiler
