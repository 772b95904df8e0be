#include "server/http/metrics.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "server/gpu_metrics.hpp"
#include "server/http/sla_metrics.hpp"

namespace kiln::server::http {
namespace {

std::string escape_label(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

void header(std::string& out, const Family& f) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
}

// Whole-machine CPU utilization since the previous scrape, from /proc/stat.
double cpu_utilization() {
  static std::mutex mutex;
  static uint64_t last_busy = 0, last_total = 0;
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  in >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7];
  if (!in || cpu != "cpu") return 0;
  uint64_t total = 0;
  for (uint64_t x : v) total += x;
  const uint64_t idle = v[3] + v[4];
  const uint64_t busy = total - idle;
  std::lock_guard lock(mutex);
  double util = 0;
  if (total > last_total && busy >= last_busy) {
    util = static_cast<double>(busy - last_busy) / static_cast<double>(total - last_total);
  }
  last_busy = busy;
  last_total = total;
  return util;
}

// MemTotal and MemTotal - MemAvailable from /proc/meminfo, in bytes.
std::pair<uint64_t, uint64_t> cpu_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0, total = 0, available = 0;
  while (in >> key >> value >> unit) {
    if (key == "MemTotal:") total = value * 1024;
    if (key == "MemAvailable:") available = value * 1024;
  }
  return {total, total >= available ? total - available : 0};
}

// The latency summaries of every version that keeps them, one family per kind, in Prometheus
// text through prometheus-cpp's serializer.
std::string render_summaries(const InferenceServer& core) {
  std::vector<prometheus::MetricFamily> families;
  const auto versions = core.repository().all_versions();
  for (size_t k = 0; k < kLatencyKinds; ++k) {
    const LatencySummaryFamily& f = latency_summary_families()[k];
    prometheus::MetricFamily family{f.name, f.help, prometheus::MetricType::Summary, {}};
    for (const auto& v : versions) {
      const LatencySummaries* summaries = v->statistics().summaries();
      if (summaries == nullptr) continue;
      prometheus::ClientMetric metric = summaries->collect(static_cast<LatencyKind>(k));
      metric.label = {{"model", v->name()}, {"version", std::to_string(v->version())}};
      family.metric.push_back(std::move(metric));
    }
    if (!family.metric.empty()) families.push_back(std::move(family));
  }
  return families.empty() ? std::string() : prometheus::TextSerializer().Serialize(families);
}

}  // namespace

std::string render_metrics(const InferenceServer& core) {
  std::vector<ModelStatisticsEntry> entries = core.statistics();
  std::vector<std::pair<std::string, double>> load_times;
  for (const auto& v : core.repository().all_versions()) {
    load_times.emplace_back(
        fmt::format("model=\"{}\",version=\"{}\"", escape_label(v->name()), v->version()),
        v->load_seconds());
  }
  std::string out;
  const bool latency_counters = core.repository().options().metrics.counter_latencies;
  auto family = [&](const Family& f, auto value_of) {
    header(out, f);
    for (const ModelStatisticsEntry& e : entries) {
      out += fmt::format("{}{{model=\"{}\",version=\"{}\"}} {}\n", f.name, escape_label(e.name),
                         e.version, value_of(e.stats));
    }
  };
  family({"nv_inference_request_success", "counter",
          "Number of successful inference requests, all batch sizes"},
         [](const StatisticsSnapshot& s) { return s.inference.success.count; });
  // One series per reason, labels in tritonserver's (sorted) order.
  header(out, {"nv_inference_request_failure", "counter",
               "Number of failed inference requests, all batch sizes"});
  for (const ModelStatisticsEntry& e : entries) {
    for (size_t r = 0; r < kFailureReasonNames.size(); ++r) {
      out += fmt::format(
          "nv_inference_request_failure{{model=\"{}\",reason=\"{}\",version=\"{}\"}} {}\n",
          escape_label(e.name), kFailureReasonNames[r], e.version, e.stats.failures[r]);
    }
  }
  family({"nv_inference_count", "counter",
          "Number of inferences performed (does not include cached requests)"},
         [](const StatisticsSnapshot& s) { return s.inference_count; });
  family({"nv_inference_exec_count", "counter",
          "Number of model executions performed (does not include cached requests)"},
         [](const StatisticsSnapshot& s) { return s.execution_count; });
  // --metrics-config counter_latencies=false drops the cumulative latency counters.
  if (latency_counters) {
    family({"nv_inference_request_duration_us", "counter",
            "Cumulative inference request duration in microseconds (includes cached requests)"},
           [](const StatisticsSnapshot& s) {
             return (s.inference.success.ns + s.inference.fail.ns) / 1000;
           });
    family({"nv_inference_queue_duration_us", "counter",
            "Cumulative inference queuing duration in microseconds (includes cached requests)"},
           [](const StatisticsSnapshot& s) { return s.inference.queue.ns / 1000; });
    family({"nv_inference_compute_input_duration_us", "counter",
            "Cumulative compute input duration in microseconds (does not include cached requests)"},
           [](const StatisticsSnapshot& s) { return s.inference.compute_input.ns / 1000; });
    family({"nv_inference_compute_infer_duration_us", "counter",
            "Cumulative compute inference duration in microseconds (does not include cached "
            "requests)"},
           [](const StatisticsSnapshot& s) { return s.inference.compute_infer.ns / 1000; });
    family({"nv_inference_compute_output_duration_us", "counter",
            "Cumulative inference compute output duration in microseconds (does not include cached "
            "requests)"},
           [](const StatisticsSnapshot& s) { return s.inference.compute_output.ns / 1000; });
  }
  // As tritonserver: the cache's series only when the server has one.
  if (core.response_cache()) {
    family({"nv_cache_num_hits_per_model", "counter", "Number of cache hits per model"},
           [](const StatisticsSnapshot& s) { return s.inference.cache_hit.count; });
    family({"nv_cache_num_misses_per_model", "counter", "Number of cache misses per model"},
           [](const StatisticsSnapshot& s) { return s.inference.cache_miss.count; });
    family({"nv_cache_hit_duration_per_model", "counter",
            "Total cache hit duration per model, in microseconds"},
           [](const StatisticsSnapshot& s) { return s.inference.cache_hit.ns / 1000; });
    family({"nv_cache_miss_duration_per_model", "counter",
            "Total cache miss (insert+lookup) duration per model, in microseconds"},
           [](const StatisticsSnapshot& s) { return s.inference.cache_miss.ns / 1000; });
  }
  family({"nv_inference_pending_request_count", "gauge",
          "Instantaneous number of pending requests awaiting execution per-model."},
         [](const StatisticsSnapshot& s) { return s.pending; });
  out += render_summaries(core);
  out += render_sla_metrics(core);
  header(out, {"nv_model_load_duration_secs", "gauge", "Model load time in seconds"});
  for (const auto& [labels, secs] : load_times) {
    out += fmt::format("nv_model_load_duration_secs{{{}}} {}\n", labels, secs);
  }
  const MetricsOptions& options = core.repository().options().metrics;
  if (options.gpu) out += render_gpu_metrics(GpuMonitor::instance().read());
  if (options.cpu) {
    header(out, {"nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]"});
    out += fmt::format("nv_cpu_utilization {}\n", cpu_utilization());
    const auto [total, used] = cpu_memory();
    header(out, {"nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes"});
    out += fmt::format("nv_cpu_memory_total_bytes {}\n", total);
    header(out, {"nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes"});
    out += fmt::format("nv_cpu_memory_used_bytes {}\n", used);
  }
  return out;
}

}  // namespace kiln::server::http
