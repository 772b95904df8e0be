#include "server/trace_settings.hpp"

#include <charconv>
#include <limits>

#include "core/closest_name.hpp"
#include "core/error.hpp"

namespace kiln::server {
namespace {

const std::vector<std::string> kSettingNames = {"trace_level",   "trace_rate", "trace_count",
                                                "log_frequency", "trace_file", "trace_mode"};

// The one value of a single-valued setting.
const std::string& single(std::string_view name, const std::vector<std::string>& values) {
  KILN_CHECK(values.size() == 1, ErrorCode::InvalidArgument,
             "trace setting '{}' takes one value, got {}", name, values.size());
  return values.front();
}

template <typename T>
std::optional<T> parse_number(std::string_view text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

uint32_t parse_rate(std::string_view text) {
  const auto v = parse_number<uint32_t>(text);
  KILN_CHECK(v.has_value(), ErrorCode::InvalidArgument, "Unable to parse 'trace_rate', got: {}",
             text);
  KILN_CHECK(*v != 0, ErrorCode::InvalidArgument,
             "Attempting to set invalid trace setting :sample rate must be non-zero");
  return *v;
}

int64_t parse_count(std::string_view text) {
  const auto v = parse_number<int64_t>(text);
  KILN_CHECK(v.has_value() && *v >= -1, ErrorCode::InvalidArgument,
             "Unable to parse 'trace_count'. Expecting value >= -1, got:{}", text);
  return *v;
}

uint32_t parse_log_frequency(std::string_view text) {
  const auto v = parse_number<uint32_t>(text);
  KILN_CHECK(v.has_value(), ErrorCode::InvalidArgument,
             "Unable to parse 'log_frequency'. Expecting an unsigned integer, got: {}", text);
  return *v;
}

// trace_level's list: ["OFF"] or levels among TIMESTAMPS (TENSORS is Triton's, not traced here).
bool parse_level(const std::vector<std::string>& levels) {
  KILN_CHECK(!levels.empty(), ErrorCode::InvalidArgument, "trace setting 'trace_level' is empty");
  bool off = false, timestamps = false;
  for (const std::string& l : levels) {
    if (l == "OFF") {
      off = true;
    } else if (l == "TIMESTAMPS") {
      timestamps = true;
    } else if (l == "TENSORS") {
      fail(ErrorCode::Unsupported,
           "trace level 'TENSORS' is not supported by kiln-serve: only TIMESTAMPS is traced");
    } else {
      fail(ErrorCode::InvalidArgument,
           "Unable to parse 'trace_level': unknown level '{}' (OFF, TIMESTAMPS or TENSORS){}", l,
           did_you_mean(l, {"OFF", "TIMESTAMPS", "TENSORS"}));
    }
  }
  KILN_CHECK(!(off && levels.size() > 1), ErrorCode::InvalidArgument,
             "Expect only one trace level 'OFF' is specified");
  return timestamps;
}

void check_name(std::string_view name) {
  if (name == "trace_file") {
    fail(ErrorCode::Unsupported, "trace file location can not be updated through network protocol");
  }
  if (name == "trace_mode") {
    fail(ErrorCode::Unsupported, "trace mode can not be updated through network protocol");
  }
  bool known = false;
  for (const std::string& n : kSettingNames) known = known || n == name;
  KILN_CHECK(known, ErrorCode::InvalidArgument, "unknown trace setting '{}'{}", name,
             did_you_mean(name, kSettingNames));
}

}  // namespace

void apply_trace_update(TraceSettings& settings, const TraceSettings& start,
                        const TraceSettingsUpdate& update) {
  TraceSettings next = settings;
  for (const auto& [name, value] : update) {
    check_name(name);
    if (name == "trace_level") {
      next.timestamps = value ? parse_level(*value) : start.timestamps;
    } else if (name == "trace_rate") {
      next.rate = value ? parse_rate(single(name, *value)) : start.rate;
    } else if (name == "trace_count") {
      next.count = value ? parse_count(single(name, *value)) : start.count;
    } else {
      next.log_frequency = value ? parse_log_frequency(single(name, *value)) : start.log_frequency;
    }
  }
  settings = next;
}

void apply_trace_update(TraceOverride& model, const TraceSettingsUpdate& update) {
  TraceOverride next = model;
  for (const auto& [name, value] : update) {
    check_name(name);
    if (name == "trace_level") {
      next.timestamps = value ? std::optional(parse_level(*value)) : std::nullopt;
    } else if (name == "trace_rate") {
      next.rate = value ? std::optional(parse_rate(single(name, *value))) : std::nullopt;
    } else if (name == "trace_count") {
      next.count = value ? std::optional(parse_count(single(name, *value))) : std::nullopt;
    } else {
      next.log_frequency =
          value ? std::optional(parse_log_frequency(single(name, *value))) : std::nullopt;
    }
  }
  model = next;
}

TraceSettings merged(const TraceSettings& server, const TraceOverride& model) {
  TraceSettings s = server;
  if (model.timestamps) s.timestamps = *model.timestamps;
  if (model.rate) s.rate = *model.rate;
  if (model.count) s.count = *model.count;
  if (model.log_frequency) s.log_frequency = *model.log_frequency;
  return s;
}

std::vector<std::pair<std::string, std::vector<std::string>>> trace_settings_view(
    const TraceSettings& s) {
  return {{"trace_level", {s.timestamps ? "TIMESTAMPS" : "OFF"}},
          {"trace_rate", {std::to_string(s.rate)}},
          {"trace_count", {std::to_string(s.count)}},
          {"log_frequency", {std::to_string(s.log_frequency)}},
          {"trace_file", {s.file}},
          {"trace_mode", {"triton"}}};
}

TraceSettings trace_settings_from_flags(const TraceFlags& flags) {
  TraceSettings s;
  std::vector<std::string> levels;
  for (const std::string& entry : flags.config) {
    std::string_view text = entry;
    bool triton_mode = false;
    if (const size_t comma = text.find(','); comma != std::string_view::npos) {
      const std::string_view mode = text.substr(0, comma);
      if (mode == "opentelemetry") {
        fail(ErrorCode::Unsupported,
             "--trace-config {}: the opentelemetry trace mode is not supported by kiln-serve "
             "(use triton,file=PATH)",
             entry);
      }
      KILN_CHECK(mode == "triton", ErrorCode::InvalidArgument,
                 "--trace-config {}: unknown trace mode '{}' (triton)", entry, mode);
      triton_mode = true;
      text = text.substr(comma + 1);
    }
    const size_t eq = text.find('=');
    KILN_CHECK(eq != std::string_view::npos, ErrorCode::InvalidArgument,
               "--trace-config {}: expected [triton,]<setting>=<value>", entry);
    const std::string_view name = text.substr(0, eq), value = text.substr(eq + 1);
    if (name == "rate") {
      s.rate = parse_rate(value);
    } else if (name == "level") {
      levels.emplace_back(value);
    } else if (name == "count") {
      s.count = parse_count(value);
    } else if (name == "mode") {
      if (value == "opentelemetry") {
        fail(ErrorCode::Unsupported,
             "--trace-config mode=opentelemetry: the opentelemetry trace mode is not supported "
             "by kiln-serve");
      }
      KILN_CHECK(value == "triton", ErrorCode::InvalidArgument,
                 "--trace-config mode={}: unknown trace mode (triton)", value);
    } else if (triton_mode && name == "file") {
      s.file = std::string(value);
    } else if (triton_mode && (name == "log-frequency" || name == "log_frequency")) {
      s.log_frequency = parse_log_frequency(value);
    } else {
      fail(ErrorCode::InvalidArgument,
           "--trace-config {}: unknown setting '{}' (rate, level, count, mode; triton,file and "
           "triton,log-frequency){}",
           entry, name,
           did_you_mean(name, {"rate", "level", "count", "mode", "file", "log-frequency"}));
    }
  }
  if (!flags.file.empty()) s.file = flags.file;
  for (const std::string& l : flags.level) levels.push_back(l);
  if (flags.rate) s.rate = parse_rate(*flags.rate);
  if (flags.count) s.count = parse_count(*flags.count);
  if (flags.log_frequency) s.log_frequency = parse_log_frequency(*flags.log_frequency);
  // tritonserver's older --trace-level took MIN / MAX for what TIMESTAMPS is now.
  for (std::string& l : levels) {
    if (l == "MIN" || l == "MAX") l = "TIMESTAMPS";
  }
  if (!levels.empty()) s.timestamps = parse_level(levels);
  KILN_CHECK(!s.timestamps || !s.file.empty(), ErrorCode::InvalidArgument,
             "trace level TIMESTAMPS needs a trace file: --trace-config triton,file=PATH");
  return s;
}

}  // namespace kiln::server
