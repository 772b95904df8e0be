#pragma once
// The server's log (Triton's logging extension): one process-wide sink whose settings -- which
// severities are written, the verbose level, the line format, the file -- come from the
// --log-* flags and change at run time through /v2/logging and gRPC LogSettings. Lines look
// like tritonserver's: "I1206 06:58:00.123456 4242 repository.cpp:586] message" (default) or
// "2026-12-06T06:58:00Z I repository.cpp:586] message" (ISO8601).
#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <source_location>
#include <string>
#include <string_view>
#include <variant>

namespace kiln::server {

struct LogSettings {
  std::string file;  // empty: standard error
  bool info = true, warning = true, error = true;
  uint32_t verbose_level = 0;
  std::string format = "default";  // or "ISO8601"
};

// One setting as a client sends it (/v2/logging's JSON, gRPC LogSettings' parameters): sets
// `name` (log_file, log_info, log_warning, log_error, log_verbose_level, log_format) in
// `settings`; InvalidArgument for an unknown name or a value of the wrong type.
using LogSettingValue = std::variant<bool, uint64_t, std::string>;
void set_log_setting(LogSettings& settings, std::string_view name, const LogSettingValue& value);

enum class LogSeverity { Info, Warning, Error, Verbose };

class ServerLog {
 public:
  static ServerLog& instance();

  LogSettings settings() const;
  // Checks the whole of `next` first (format, file) and changes nothing when it is refused
  // (kiln::Error, InvalidArgument, naming the setting).
  void apply(const LogSettings& next);

  bool enabled(LogSeverity severity, uint32_t level = 1) const;
  void write(LogSeverity severity, std::string_view message,
             std::source_location where = std::source_location::current());

 private:
  ServerLog() = default;
  ~ServerLog();
  mutable std::mutex mutex_;
  LogSettings settings_;
  std::FILE* file_ = nullptr;  // null: stderr
};

// The usual entry points: the line is formatted only when its severity is on.
template <typename... Args>
struct log_info {
  explicit log_info(fmt::format_string<Args...> f, Args&&... args,
                    std::source_location where = std::source_location::current()) {
    if (ServerLog::instance().enabled(LogSeverity::Info)) {
      ServerLog::instance().write(LogSeverity::Info, fmt::format(f, std::forward<Args>(args)...),
                                  where);
    }
  }
};
template <typename... Args>
log_info(fmt::format_string<Args...>, Args&&...) -> log_info<Args...>;

template <typename... Args>
struct log_warning {
  explicit log_warning(fmt::format_string<Args...> f, Args&&... args,
                       std::source_location where = std::source_location::current()) {
    if (ServerLog::instance().enabled(LogSeverity::Warning)) {
      ServerLog::instance().write(LogSeverity::Warning, fmt::format(f, std::forward<Args>(args)...),
                                  where);
    }
  }
};
template <typename... Args>
log_warning(fmt::format_string<Args...>, Args&&...) -> log_warning<Args...>;

template <typename... Args>
struct log_error {
  explicit log_error(fmt::format_string<Args...> f, Args&&... args,
                     std::source_location where = std::source_location::current()) {
    if (ServerLog::instance().enabled(LogSeverity::Error)) {
      ServerLog::instance().write(LogSeverity::Error, fmt::format(f, std::forward<Args>(args)...),
                                  where);
    }
  }
};
template <typename... Args>
log_error(fmt::format_string<Args...>, Args&&...) -> log_error<Args...>;

// Verbose lines of `level` and below are written when the verbose level is at least `level`.
template <typename... Args>
struct log_verbose {
  explicit log_verbose(uint32_t level, fmt::format_string<Args...> f, Args&&... args,
                       std::source_location where = std::source_location::current()) {
    if (ServerLog::instance().enabled(LogSeverity::Verbose, level)) {
      ServerLog::instance().write(LogSeverity::Verbose, fmt::format(f, std::forward<Args>(args)...),
                                  where);
    }
  }
};
template <typename... Args>
log_verbose(uint32_t, fmt::format_string<Args...>, Args&&...) -> log_verbose<Args...>;

}  // namespace kiln::server
