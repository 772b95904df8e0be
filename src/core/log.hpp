#pragma once
// Kiln's log: one line per message to a replaceable sink (stderr by default), so a library user,
// the server or a test decides where warnings go. Thread-safe.
#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kiln {

enum class LogLevel { Debug, Info, Warning, Error };

using LogSink = std::function<void(LogLevel, std::string_view)>;

// Sends one message to the sink. The default sink prints "kiln: warning: ..." to stderr for
// warnings and errors, and for info and debug messages too when the environment variable
// KILN_LOG is "info" or "debug" (respectively).
void log_message(LogLevel level, std::string_view message);
// Installs `sink` (an empty function restores the default) and returns the previous one.
LogSink set_log_sink(LogSink sink);

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  log_message(LogLevel::Info, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void log_warning(fmt::format_string<Args...> format, Args&&... args) {
  log_message(LogLevel::Warning, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kiln
