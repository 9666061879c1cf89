// spdlog behind a plain-string interface (compiled without the LibTorch include folder).
#include "eagle/util/log_sink.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace eagle::log {
namespace {

LogLevel g_level = LogLevel::info;
std::function<void()> g_before, g_after;
std::string g_prefix;

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("eagle");
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace: return spdlog::level::trace;
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::error: return spdlog::level::err;
    case LogLevel::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

bool parse_log_level(std::string_view name, LogLevel& out) {
  static constexpr std::pair<std::string_view, LogLevel> names[] = {
      {"trace", LogLevel::trace}, {"debug", LogLevel::debug}, {"info", LogLevel::info},
      {"warn", LogLevel::warn},   {"error", LogLevel::error}, {"off", LogLevel::off}};
  for (const auto& [n, l] : names) {
    if (n == name) {
      out = l;
      return true;
    }
  }
  return false;
}

void set_console_hooks(std::function<void()> before, std::function<void()> after) {
  g_before = std::move(before);
  g_after = std::move(after);
}

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void set_line_prefix(std::string prefix) { g_prefix = std::move(prefix); }

void log_line(LogLevel level, std::string_view area, std::string_view message) {
  if (level == LogLevel::off || static_cast<int>(level) < static_cast<int>(g_level)) return;
  if (g_before) g_before();
  logger().log(to_spdlog(level), "{}[{}] {}", g_prefix, area, message);
  // A bar is redrawn right after the line, so the line must be out first.
  if (level >= LogLevel::warn || g_after) logger().flush();
  if (g_after) g_after();
}

}  // namespace eagle::log
