#include "server/server_log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/error.hpp"

namespace kiln::server {
namespace {

char letter(LogSeverity s) {
  switch (s) {
    case LogSeverity::Info:
      return 'I';
    case LogSeverity::Warning:
      return 'W';
    case LogSeverity::Error:
      return 'E';
    case LogSeverity::Verbose:
      return 'I';  // tritonserver writes verbose lines as information too
  }
  return 'I';
}

// The file's name without its directories.
std::string_view base_name(const char* path) {
  std::string_view p(path);
  const size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

}  // namespace

void set_log_setting(LogSettings& settings, std::string_view name, const LogSettingValue& value) {
  auto as_bool = [&](bool& field) {
    KILN_CHECK_ARG(std::holds_alternative<bool>(value), "log setting '{}' takes a boolean", name);
    field = std::get<bool>(value);
  };
  if (name == "log_info") {
    as_bool(settings.info);
  } else if (name == "log_warning") {
    as_bool(settings.warning);
  } else if (name == "log_error") {
    as_bool(settings.error);
  } else if (name == "log_verbose_level") {
    KILN_CHECK_ARG(
        std::holds_alternative<uint64_t>(value) && std::get<uint64_t>(value) <= UINT32_MAX,
        "log setting 'log_verbose_level' takes an unsigned 32-bit integer");
    settings.verbose_level = static_cast<uint32_t>(std::get<uint64_t>(value));
  } else if (name == "log_file" || name == "log_format") {
    KILN_CHECK_ARG(std::holds_alternative<std::string>(value), "log setting '{}' takes a string",
                   name);
    (name == "log_file" ? settings.file : settings.format) = std::get<std::string>(value);
  } else {
    fail(ErrorCode::InvalidArgument,
         "unknown log setting '{}' (log_file, log_info, log_warning, log_error, "
         "log_verbose_level, log_format)",
         name);
  }
}

ServerLog& ServerLog::instance() {
  static ServerLog log;
  return log;
}

ServerLog::~ServerLog() {
  if (file_) std::fclose(file_);
}

LogSettings ServerLog::settings() const {
  std::lock_guard lock(mutex_);
  return settings_;
}

void ServerLog::apply(const LogSettings& next) {
  KILN_CHECK_ARG(next.format == "default" || next.format == "ISO8601",
                 "log_format '{}' is not one of default, ISO8601", next.format);
  // Held throughout, so that two changes cannot interleave (writers wait for an fopen).
  std::lock_guard lock(mutex_);
  if (next.file != settings_.file) {
    std::FILE* opened = nullptr;
    if (!next.file.empty()) {
      opened = std::fopen(next.file.c_str(), "a");
      KILN_CHECK_ARG(opened, "log_file '{}' cannot be opened for writing: {}", next.file,
                     std::strerror(errno));
    }
    if (file_) std::fclose(file_);
    file_ = opened;
  }
  settings_ = next;
  info_ = next.info;
  warning_ = next.warning;
  error_ = next.error;
  verbose_level_ = next.verbose_level;
}

bool ServerLog::enabled(LogSeverity severity, uint32_t level) const {
  switch (severity) {
    case LogSeverity::Info:
      return info_.load(std::memory_order_relaxed);
    case LogSeverity::Warning:
      return warning_.load(std::memory_order_relaxed);
    case LogSeverity::Error:
      return error_.load(std::memory_order_relaxed);
    case LogSeverity::Verbose:
      return level > 0 && verbose_level_.load(std::memory_order_relaxed) >= level;
  }
  return false;
}

void ServerLog::write(LogSeverity severity, std::string_view message, SourcePlace where) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const long micros = static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  const long thread = static_cast<long>(::syscall(SYS_gettid));
  std::lock_guard lock(mutex_);
  std::string line;
  if (settings_.format == "ISO8601") {
    line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z {} {}:{}] {}\n", utc.tm_year + 1900,
                       utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                       letter(severity), base_name(where.file_name()), where.line(), message);
  } else {
    line = fmt::format("{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {} {}:{}] {}\n", letter(severity),
                       utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, micros,
                       thread, base_name(where.file_name()), where.line(), message);
  }
  std::FILE* out = file_ ? file_ : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace kiln::server
