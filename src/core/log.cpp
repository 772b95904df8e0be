#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace kiln {
namespace {

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

LogSink& current_sink() {
  static LogSink sink;
  return sink;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warning:
      return "warning";
    case LogLevel::Error:
      return "error";
  }
  return "?";
}

// The least severe level the default sink prints.
LogLevel default_threshold() {
  static const LogLevel level = [] {
    const char* env = std::getenv("KILN_LOG");
    std::string v = env ? env : "";
    if (v == "debug") return LogLevel::Debug;
    if (v == "info") return LogLevel::Info;
    return LogLevel::Warning;
  }();
  return level;
}

}  // namespace

void log_message(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> lock(log_mutex());
  if (current_sink()) {
    current_sink()(level, message);
    return;
  }
  if (level < default_threshold()) return;
  std::fprintf(stderr, "kiln: %s: %.*s\n", level_name(level), static_cast<int>(message.size()),
               message.data());
}

LogSink set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(log_mutex());
  LogSink previous = std::move(current_sink());
  current_sink() = std::move(sink);
  return previous;
}

}  // namespace kiln
