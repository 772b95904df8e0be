#include "compiler/precision_report.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::compiler {

std::string format_stats(const runtime::ErrorStats& s) {
  if (!s.mismatch.empty()) return s.mismatch;
  std::string text =
      fmt::format("max abs {:.2e}  max rel {:.2e}  rel L2 {:.2e}", s.max_abs, s.max_rel, s.rel_l2);
  if (s.outside)
    text += fmt::format("  ({} of {} elements out of tolerance)", s.outside, s.elements);
  return text;
}

std::string format_checks(const std::vector<runtime::OutputCheck>& checks,
                          const std::vector<std::string>& order,
                          const runtime::DriftTolerance& tol) {
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
    double limit = tol.max_rel_l2_for(it->stats.dtype);
    std::string note = limit != tol.max_rel_l2 ? fmt::format(" (limit {:.0e} for {})", limit,
                                                             dtype_name(it->stats.dtype))
                                               : "";
    out += fmt::format("  {:<{}}  {}  {}{}\n", name, width, format_stats(it->stats),
                       it->pass ? "PASS" : "FAIL", note);
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

}  // namespace kiln::compiler
