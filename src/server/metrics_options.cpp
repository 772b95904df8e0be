#include "server/metrics_options.hpp"

#include <charconv>
#include <string>

#include "core/error.hpp"

namespace kiln::server {
namespace {

bool parse_bool(std::string_view setting, std::string_view value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  fail(ErrorCode::InvalidArgument, "--metrics-config {}: '{}' is not true or false", setting,
       value);
}

double parse_fraction(std::string_view what, std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  KILN_CHECK_ARG(ec == std::errc() && end == text.data() + text.size() && v > 0 && v < 1,
                 "--metrics-config summary_quantiles: {} '{}' is not a number in (0, 1)", what,
                 text);
  return v;
}

// "0.5:0.05,0.9:0.01": tritonserver's format.
std::vector<SummaryQuantile> parse_quantiles(std::string_view text) {
  std::vector<SummaryQuantile> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view pair = text.substr(0, comma);
    const size_t colon = pair.find(':');
    KILN_CHECK_ARG(colon != std::string_view::npos,
                   "--metrics-config summary_quantiles: '{}' is not <quantile>:<error>", pair);
    out.push_back({parse_fraction("quantile", pair.substr(0, colon)),
                   parse_fraction("error", pair.substr(colon + 1))});
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  KILN_CHECK_ARG(!out.empty(), "--metrics-config summary_quantiles: no quantile given");
  return out;
}

}  // namespace

void apply_metrics_config(MetricsOptions& options, std::string_view spec) {
  const size_t comma = spec.find(',');
  const size_t eq = spec.find('=');
  // "<group>,<setting>=<value>": only the global group (empty name) has latency settings.
  if (comma != std::string_view::npos && comma < eq) {
    KILN_CHECK_ARG(comma == 0, "--metrics-config '{}': only global settings are supported", spec);
    spec.remove_prefix(1);
  }
  const size_t at = spec.find('=');
  KILN_CHECK_ARG(at != std::string_view::npos && at > 0,
                 "--metrics-config '{}' is not <setting>=<value>", spec);
  const std::string_view setting = spec.substr(0, at);
  std::string_view value = spec.substr(at + 1);
  // Shells hand quotes through when the value is written summary_quantiles="...".
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    value = value.substr(1, value.size() - 2);
  }
  if (setting == "counter_latencies") {
    options.counter_latencies = parse_bool(setting, value);
  } else if (setting == "summary_latencies") {
    options.summary_latencies = parse_bool(setting, value);
  } else if (setting == "summary_quantiles") {
    options.quantiles = parse_quantiles(value);
  } else {
    fail(ErrorCode::InvalidArgument,
         "--metrics-config: unknown setting '{}' (counter_latencies, summary_latencies, "
         "summary_quantiles)",
         setting);
  }
}

}  // namespace kiln::server
