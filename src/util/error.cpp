// Formatting and exit codes of eagle::Error.
#include "eagle/util/error.h"

namespace eagle {

ExitCode exit_code_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return ExitCode::usage;
    case ErrorKind::input: return ExitCode::input;
    case ErrorKind::output: return ExitCode::output;
    case ErrorKind::training: return ExitCode::training;
    case ErrorKind::gate: return ExitCode::gate;
    case ErrorKind::interrupted: return ExitCode::interrupted;
    case ErrorKind::internal: return ExitCode::internal;
  }
  return ExitCode::internal;
}

std::string Error::format() const {
  std::string out;
  if (!file_.empty()) out += file_ + ": ";
  if (!place_.empty()) out += place_ + ": ";
  out += message_;
  if (!expected_.empty()) out += ": expected " + expected_;
  if (!found_.empty()) out += (expected_.empty() ? ": found " : ", found ") + found_;
  if (!hint_.empty()) out += " (hint: " + hint_ + ")";
  return out;
}

const char* Error::what() const noexcept {
  what_ = format();
  return what_.c_str();
}

}  // namespace eagle
