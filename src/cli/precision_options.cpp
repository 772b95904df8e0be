#include "cli/precision_options.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::cli {

runtime::DriftTolerance ToleranceOptions::tolerance() const {
  runtime::DriftTolerance t;
  t.max_rel_l2 = max_rel_l2;
  // A limit the user gives is taken as it is, for every element type.
  t.scale_by_type = !(max_rel_l2_option && max_rel_l2_option->count());
  if (rtol_option && rtol_option->count()) t.rtol = rtol;
  if (atol_option && atol_option->count()) t.atol = atol;
  return t;
}

void add_tolerance_options(CLI::App* cmd, ToleranceOptions& o) {
  o.max_rel_l2_option =
      cmd->add_option("--max-rel-l2", o.max_rel_l2,
                      "Largest relative L2 error ||a-e||/||e|| allowed per output (default "
                      "1e-4; at least 1e-3 for float16, 1e-2 for bfloat16 outputs unless given)")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
  o.rtol_option =
      cmd->add_option("--rtol", o.rtol, "Also require |a-e| <= atol + rtol*|e| for every element")
          ->check(CLI::NonNegativeNumber);
  o.atol_option = cmd->add_option("--atol", o.atol, "Absolute term of that element rule")
                      ->check(CLI::NonNegativeNumber);
}

std::string format_stats(const runtime::ErrorStats& s) {
  if (!s.mismatch.empty()) return s.mismatch;
  std::string text =
      fmt::format("max abs {:.2e}  max rel {:.2e}  rel L2 {:.2e}", s.max_abs, s.max_rel, s.rel_l2);
  if (s.outside)
    text += fmt::format("  ({} of {} elements out of tolerance)", s.outside, s.elements);
  return text;
}

std::string format_checks(const std::vector<runtime::OutputCheck>& checks,
                          const std::vector<std::string>& order) {
  size_t width = 8;
  for (const auto& c : checks) width = std::max(width, c.name.size());
  std::string out;
  for (const std::string& name : order) {
    auto it = std::find_if(checks.begin(), checks.end(),
                           [&](const runtime::OutputCheck& c) { return c.name == name; });
    if (it == checks.end()) continue;
    if (!it->skipped.empty()) {
      out += fmt::format("  {:<{}}  {}  SKIP ({})\n", name, width, format_stats(it->stats),
                         it->skipped);
      continue;
    }
    out += fmt::format("  {:<{}}  {}  {}\n", name, width, format_stats(it->stats),
                       it->pass ? "PASS" : "FAIL");
  }
  return out;
}

std::string format_drift(const runtime::NodeDrift& d) {
  std::string text = fmt::format("{} (output '{}': {})", d.node, d.value, format_stats(d.stats));
  if (!d.unobserved.empty()) {
    // Their outputs were fused away or renamed, so the drift may start in any of them.
    text += "; the drift may start earlier, in ";
    // The nearest ones: a fused subgraph (attention) can hide dozens of nodes.
    constexpr size_t kShown = 6;
    size_t first = d.unobserved.size() > kShown ? d.unobserved.size() - kShown : 0;
    if (first) text += fmt::format("{} nodes up to ", first);
    for (size_t i = first; i < d.unobserved.size(); ++i) {
      text += (i == first ? "" : i + 1 == d.unobserved.size() ? " or " : ", ") + d.unobserved[i];
    }
    text += ", whose output the compiled graph does not keep (fused or renamed)";
  }
  return text;
}

}  // namespace kiln::cli
