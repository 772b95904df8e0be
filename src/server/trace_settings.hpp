#pragma once
// Triton's trace settings (the trace extension): the values every request's sampling reads,
// server-wide and overridden per model, as `--trace-config` sets them at start and
// /v2[/models/NAME]/trace/setting or gRPC TraceSetting change them at run time.
//
// A client sends each setting as a string or a list of strings (gRPC: a repeated string); an
// absent value (JSON null, an empty gRPC list) clears a model's override, or resets a
// server-wide setting to its start value. Updates are checked whole before anything changes.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::server {

struct TraceSettings {
  bool timestamps = false;     // trace_level: ["TIMESTAMPS"], or ["OFF"]
  uint32_t rate = 1000;        // trace_rate: one request in `rate` is traced
  int64_t count = -1;          // trace_count: traces still to take (-1: no limit)
  uint32_t log_frequency = 0;  // log_frequency: traces a file holds (0: one file)
  std::string file;            // trace_file: fixed at start (empty: no trace is written)
};

// The settings a model overrides; the others follow the server's.
struct TraceOverride {
  std::optional<bool> timestamps;
  std::optional<uint32_t> rate;
  std::optional<int64_t> count;
  std::optional<uint32_t> log_frequency;
  bool empty() const { return !timestamps && !rate && !count && !log_frequency; }
};

// One setting as a client sent it: nullopt clears it.
using TraceSettingValue = std::optional<std::vector<std::string>>;
using TraceSettingsUpdate = std::map<std::string, TraceSettingValue, std::less<>>;

// Applies `update` to `settings` (the server's; `start` holds their values at start, what a
// cleared setting returns to). kiln::Error InvalidArgument naming the setting for an unknown
// name, an unparsable or out-of-range value, TENSORS (not traced by Kiln), "OFF" beside
// another level, or trace_file / trace_mode (fixed at start, as in Triton); nothing changes
// then.
void apply_trace_update(TraceSettings& settings, const TraceSettings& start,
                        const TraceSettingsUpdate& update);
// The same for a model's overrides.
void apply_trace_update(TraceOverride& model, const TraceSettingsUpdate& update);

// What a model's requests are sampled with.
TraceSettings merged(const TraceSettings& server, const TraceOverride& model);

// The settings in the protocol's form, Triton's names and order: trace_level, trace_rate,
// trace_count, log_frequency, trace_file, trace_mode.
std::vector<std::pair<std::string, std::vector<std::string>>> trace_settings_view(
    const TraceSettings& settings);

// The server's settings from tritonserver's flags: every `--trace-config` value
// ("[triton,]NAME=VALUE": rate, level (repeatable), count, mode (triton only), and in triton
// mode file, log-frequency), then the deprecated --trace-file / --trace-level / --trace-rate /
// --trace-count / --trace-log-frequency. kiln::Error InvalidArgument naming the flag, and
// Unsupported for the opentelemetry mode.
struct TraceFlags {
  std::vector<std::string> config;
  std::string file;
  std::vector<std::string> level;
  std::optional<std::string> rate, count, log_frequency;
};
TraceSettings trace_settings_from_flags(const TraceFlags& flags);

}  // namespace kiln::server
