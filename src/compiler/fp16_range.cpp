#include "compiler/fp16_range.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "compiler/observe_values.hpp"

namespace kiln::compiler {

Fp16RangeReport measure_fp16_range(std::shared_ptr<ir::Graph> graph, const GateInputs& inputs,
                                   int threads, size_t memory_budget, double timeout_seconds) {
  const auto started = std::chrono::steady_clock::now();
  Fp16RangeReport r;
  const std::vector<runtime::Feeds> sets = input_sets_for(*graph, inputs, 1);
  std::map<std::string, double> largest;
  ObserveOptions o;
  o.threads = threads;
  o.memory_budget = memory_budget;
  o.timeout_seconds = timeout_seconds;
  r.skipped =
      observe_float_values(graph, sets, o, [&](const ir::Value& v, const Tensor& t, size_t) {
        double m = 0;
        for (float x : t.values<float>()) {
          // Infinities the float32 model computes itself are no float16 overflow, and neither
          // are additive-mask sentinels (HF's finfo(float32).min, -1e9): clamped to -65504 they
          // still send a softmax's terms to 0, as the conversion's clamp of their constants
          // always did.
          if (std::isfinite(x) && x > kMaskSentinel) {
            m = std::max(m, static_cast<double>(std::fabs(x)));
          }
        }
        if (m >= kFp16RangeLimit) largest[v.name()] = std::max(largest[v.name()], m);
      });
  if (!r.skipped.empty()) return r;
  for (const auto& [name, value] : largest) {
    r.beyond.insert(name);
    r.worst.emplace_back(name, value);
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
    return "fp16: range check: every float32 value stays within float16's range\n";
  }
  std::string worst;
  for (const auto& [name, value] : r.worst) {
    worst += fmt::format("{}{} {:.3g}", worst.empty() ? "" : ", ", name, value);
  }
  const bool one = r.beyond.size() == 1;
  return fmt::format(
      "fp16: range check: {} float32 value{} {} {:.0f} or more, too close to float16's largest "
      "65504: the nodes reading or writing {} stay float32 (largest: {})\n",
      r.beyond.size(), one ? "" : "s", one ? "reaches" : "reach", kFp16RangeLimit,
      one ? "it" : "them", worst);
}

}  // namespace kiln::compiler
