// Logging front end: eagle::log::info("data", "read {} samples", n). Formats with LibTorch's fmt
// (header-only) and hands the string to the spdlog sink, so the two fmt versions never meet.
#pragma once

#include <fmt/format.h>

#include "eagle/util/log_sink.h"

namespace eagle::log {

template <typename... Args>
void write(LogLevel level, std::string_view area, fmt::format_string<Args...> f, Args&&... args) {
  if (static_cast<int>(level) < static_cast<int>(log_level())) return;
  log_line(level, area, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(std::string_view area, fmt::format_string<Args...> f, Args&&... args) {
  write(LogLevel::debug, area, f, std::forward<Args>(args)...);
}
template <typename... Args>
void info(std::string_view area, fmt::format_string<Args...> f, Args&&... args) {
  write(LogLevel::info, area, f, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(std::string_view area, fmt::format_string<Args...> f, Args&&... args) {
  write(LogLevel::warn, area, f, std::forward<Args>(args)...);
}
template <typename... Args>
void error(std::string_view area, fmt::format_string<Args...> f, Args&&... args) {
  write(LogLevel::error, area, f, std::forward<Args>(args)...);
}

}  // namespace eagle::log
