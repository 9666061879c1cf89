// Formatting and exit codes of eagle::Error.
#include "eagle/util/error.h"

namespace eagle {

ExitCode exit_code_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return ExitCode::usage;
    case ErrorKind::input: return ExitCode::input;
    case ErrorKind::output: return ExitCode::output;
    case ErrorKind::source_down:
      return ExitCode::output;
    case ErrorKind::training: return ExitCode::training;
    case ErrorKind::gate: return ExitCode::gate;
    case ErrorKind::interrupted: return ExitCode::interrupted;
    case ErrorKind::internal: return ExitCode::internal;
  }
  return ExitCode::internal;
}

namespace {

// A part longer than a line or two (a 50 MB path from a hostile config) is cut in the middle; what
// is expected is the tool's own text (a list of architectures may be long) and is never cut.
std::string bounded(const std::string& s) {
  constexpr std::size_t kMax = 400, kHead = 240, kTail = 120;
  if (s.size() <= kMax) return s;
  return s.substr(0, kHead) + "...(" + std::to_string(s.size()) + " bytes)..." + s.substr(s.size() - kTail);
}

}  // namespace

std::string Error::format() const {
  std::string out;
  if (!file_.empty()) out += bounded(file_) + ": ";
  if (!place_.empty()) out += bounded(place_) + ": ";
  out += message_;
  if (!expected_.empty()) out += ": expected " + expected_;  // our own words, never the input: not cut
  if (!found_.empty()) out += (expected_.empty() ? ": found " : ", found ") + bounded(found_);
  if (!hint_.empty()) out += " (hint: " + hint_ + ")";
  return out;
}

const char* Error::what() const noexcept {
  what_ = format();
  return what_.c_str();
}

}  // namespace eagle
