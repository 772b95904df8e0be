#pragma once
// The server's log (Triton's logging extension): one process-wide sink whose settings -- which
// severities are written, the verbose level, the line format, the file -- come from the
// --log-* flags and change at run time through /v2/logging and gRPC LogSettings. Lines look
// like tritonserver's: "I1206 06:58:00.123456 4242 repository.cpp:586] message" (default) or
// "2026-12-06T06:58:00Z I repository.cpp:586] message" (ISO8601).
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>

namespace kiln::server {

// Where a log line was written: its file and line, as tritonserver prints them. Not the
// standard library's source_location: libstdc++ 12's needs a builtin that clang 14 (the fuzz
// build's compiler) lacks, and the fuzz targets link this file.
class SourcePlace {
 public:
  static constexpr SourcePlace current(const char* file = __builtin_FILE(),
                                       unsigned line = __builtin_LINE()) {
    return SourcePlace(file, line);
  }
  constexpr const char* file_name() const { return file_; }
  constexpr unsigned line() const { return line_; }

 private:
  constexpr SourcePlace(const char* file, unsigned line) : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};

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

  // Lock-free (every request asks whether its verbose line is on).
  bool enabled(LogSeverity severity, uint32_t level = 1) const;
  void write(LogSeverity severity, std::string_view message,
             SourcePlace where = SourcePlace::current());

  // Formats and writes the line when `severity` (at verbose `level`) is on.
  template <typename... Args>
  void emit(LogSeverity severity, uint32_t level, SourcePlace where, fmt::format_string<Args...> f,
            Args&&... args) {
    if (enabled(severity, level))
      write(severity, fmt::format(f, std::forward<Args>(args)...), where);
  }

 private:
  ServerLog() = default;
  ~ServerLog();
  mutable std::mutex mutex_;  // settings_ and file_; the atomics mirror settings_'s switches
  LogSettings settings_;
  std::FILE* file_ = nullptr;  // null: stderr
  std::atomic<bool> info_{true}, warning_{true}, error_{true};
  std::atomic<uint32_t> verbose_level_{0};
};

// The usual entry points. Classes, so that the call site's location can be a defaulted argument
// after the format's arguments; the line is formatted only when its severity is on.
template <typename... Args>
struct log_info {
  explicit log_info(fmt::format_string<Args...> f, Args&&... args,
                    SourcePlace where = SourcePlace::current()) {
    ServerLog::instance().emit(LogSeverity::Info, 1, where, f, std::forward<Args>(args)...);
  }
};
template <typename... Args>
log_info(fmt::format_string<Args...>, Args&&...) -> log_info<Args...>;

template <typename... Args>
struct log_warning {
  explicit log_warning(fmt::format_string<Args...> f, Args&&... args,
                       SourcePlace where = SourcePlace::current()) {
    ServerLog::instance().emit(LogSeverity::Warning, 1, where, f, std::forward<Args>(args)...);
  }
};
template <typename... Args>
log_warning(fmt::format_string<Args...>, Args&&...) -> log_warning<Args...>;

template <typename... Args>
struct log_error {
  explicit log_error(fmt::format_string<Args...> f, Args&&... args,
                     SourcePlace where = SourcePlace::current()) {
    ServerLog::instance().emit(LogSeverity::Error, 1, where, f, std::forward<Args>(args)...);
  }
};
template <typename... Args>
log_error(fmt::format_string<Args...>, Args&&...) -> log_error<Args...>;

// Verbose lines of `level` are written when the verbose level is at least `level`.
template <typename... Args>
struct log_verbose {
  explicit log_verbose(uint32_t level, fmt::format_string<Args...> f, Args&&... args,
                       SourcePlace where = SourcePlace::current()) {
    ServerLog::instance().emit(LogSeverity::Verbose, level, where, f, std::forward<Args>(args)...);
  }
};
template <typename... Args>
log_verbose(uint32_t, fmt::format_string<Args...>, Args&&...) -> log_verbose<Args...>;

}  // namespace kiln::server
