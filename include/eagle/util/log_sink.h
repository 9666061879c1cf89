// The logging sink: plain strings in, spdlog out. This header and log_sink.cpp are the only place
// spdlog (built on Debian's fmt 9) is seen; see log.h for the formatting front end.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace eagle::log {

enum class LogLevel { trace, debug, info, warn, error, off };

// Parses "trace|debug|info|warn|error|off"; returns false for anything else.
bool parse_log_level(std::string_view name, LogLevel& out);
void set_log_level(LogLevel level);
LogLevel log_level();
// Writes "[time] [level] [prefix][area] message" to stderr when level is enabled.
void log_line(LogLevel level, std::string_view area, std::string_view message);
// Put before the area of every line, e.g. "[rank 3] " in a data-parallel run; empty: none.
void set_line_prefix(std::string prefix);
// Called before and after each console line that is written (a progress bar clears itself and
// redraws below the line); empty functions: none.
void set_console_hooks(std::function<void()> before, std::function<void()> after);

}  // namespace eagle::log
