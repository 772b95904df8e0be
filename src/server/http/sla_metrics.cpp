#include "server/http/sla_metrics.hpp"

#include <fmt/format.h>

namespace kiln::server::http {
namespace {

// A Prometheus label value: backslash, quote and newline escaped.
std::string label_value(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string render_sla_metrics(const InferenceServer& core) {
  struct Entry {
    std::string labels;  // model="m",version="1"
    SlaSnapshot sla;
  };
  std::vector<Entry> entries;
  for (const auto& v : core.repository().all_versions()) {
    std::optional<SlaSnapshot> sla = v->sla();
    if (!sla) continue;
    entries.push_back(
        {fmt::format("model=\"{}\",version=\"{}\"", label_value(v->name()), v->version()), *sla});
  }
  if (entries.empty()) return {};
  std::string out;
  auto gauge = [&](const char* name, const char* help, auto value_of) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
    for (const Entry& e : entries)
      out += fmt::format("{}{{{}}} {}\n", name, e.labels, value_of(e.sla));
  };
  gauge("kiln_sla_objective_us", "The model's p99 latency objective in microseconds",
        [](const SlaSnapshot& s) { return s.objective_ns / 1000; });
  gauge("kiln_sla_queue_delay_us",
        "The dynamic batcher's queue delay now, adapted to the latency objective, in microseconds",
        [](const SlaSnapshot& s) { return s.delay_ns / 1000; });
  gauge("kiln_sla_admission_limit_us",
        "The estimated latency above which an arriving request is refused, in microseconds",
        [](const SlaSnapshot& s) { return s.limit_ns / 1000; });
  gauge("kiln_sla_latency_p99_us",
        "The p99 request latency the latency objective's controller measured last, in "
        "microseconds",
        [](const SlaSnapshot& s) { return s.p99_ns / 1000; });
  out +=
      "# HELP kiln_sla_refused Number of requests refused because the latency objective could "
      "not be met, per priority level\n# TYPE kiln_sla_refused counter\n";
  for (const Entry& e : entries) {
    for (size_t l = 0; l < e.sla.refused.size(); ++l) {
      out += fmt::format("kiln_sla_refused{{{},priority=\"{}\"}} {}\n", e.labels, l + 1,
                         e.sla.refused[l]);
    }
  }
  return out;
}

}  // namespace kiln::server::http
