#include "compiler/plan_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cpu/cpu_backend.hpp"
#include "compiler/flops.hpp"

namespace kiln::compiler {
namespace {

// Why a node is left on a reference kernel, as the CPU backend says.
std::string fallback_reason(const ir::Node& n) {
  if (!ir::subgraphs_of(n).empty()) return "control flow: its bodies run on the interpreter";
  std::string reason = backends::CpuBackend::instance().supports(n).reason;
  return reason.empty() ? "sequence or optional values" : reason;
}

}  // namespace

PlanSummary summarize_plan(const runtime::Executor& ex) {
  const ir::Graph& g = ex.graph();
  const std::vector<runtime::KernelChoice>& choices = ex.kernel_choices();
  PlanSummary s;
  s.nodes = choices.size();
  for (const auto& c : choices) ++s.kernels[c.backend + ":" + c.kernel];
  FlopCount flops = count_flops(g, {});
  s.total_flops = flops.total;
  size_t i = 0;
  for (const ir::Node* n : g.nodes()) {
    if (i < choices.size() && choices[i].kernel == runtime::kReferenceKernel) {
      auto it = flops.by_node.find(n);
      double f = it != flops.by_node.end() ? it->second : 0;
      s.fallbacks.push_back(
          {n->op_type(), n->name().empty() ? n->label() : n->name(), f, fallback_reason(*n)});
      s.fallback_flops += f;
    }
    ++i;
  }
  std::stable_sort(s.fallbacks.begin(), s.fallbacks.end(),
                   [](const auto& a, const auto& b) { return a.flops > b.flops; });
  return s;
}

std::string describe_execution_plan(const runtime::Executor& ex, const PlanSummary& s) {
  std::string out;
  for (const auto& a : ex.arena_summaries()) {
    out += fmt::format(
        "activation memory: {} bytes planned in one {} arena (naive sum {} bytes, {:.1f}x; {} of "
        "{} values in place or views){}\n",
        a.bytes, a.device, a.naive_bytes,
        a.bytes ? static_cast<double>(a.naive_bytes) / static_cast<double>(a.bytes) : 1.0, a.shared,
        a.values, a.unplanned ? fmt::format("; {} values of unbounded size", a.unplanned) : "");
  }
  if (ex.arena_summaries().empty()) out += "activation memory: 0 bytes (no fast kernels)\n";
  out += "kernels:";
  for (const auto& [name, count] : s.kernels) out += fmt::format(" {} {}", count, name);
  out += "\n";
  // The nodes that will run slowly, said before the engine ships; a long tail is summed up.
  out += fmt::format("reference kernels (no fast kernel): {} of {} nodes, {:.1f}% of {} FLOPs{}\n",
                     s.fallbacks.size(), s.nodes,
                     s.total_flops > 0 ? 100 * s.fallback_flops / s.total_flops : 0.0,
                     si_number(s.total_flops), s.fallbacks.empty() ? "" : ":");
  constexpr size_t kListed = 20;
  for (size_t k = 0; k < s.fallbacks.size() && k < kListed; ++k) {
    const FallbackNode& f = s.fallbacks[k];
    out +=
        fmt::format("  {} '{}': {} FLOPs ({})\n", f.op_type, f.name, si_number(f.flops), f.reason);
  }
  if (s.fallbacks.size() > kListed)
    out += fmt::format("  and {} more\n", s.fallbacks.size() - kListed);
  return out;
}

std::string describe_engine(const engine::EngineInfo& info) {
  std::string s = fmt::format("engine format version: {}\nkiln version: {}\ntarget: {}\n",
                              info.format_version, info.kiln_version, info.target.to_string());
  for (const engine::Target& d : info.device_targets) {
    s += fmt::format("device target: {}{}{}{}\n", d.device, d.features.empty() ? "" : " (",
                     fmt::join(d.features, ", "), d.features.empty() ? "" : ")");
  }
  s += fmt::format("source hash: {:016x}\n", info.source_hash);
  if (!info.source_path.empty()) s += fmt::format("source model: {}\n", info.source_path);
  return s;
}

}  // namespace kiln::compiler
