// Duration and bar texts, resident memory, and the progress display (see progress.h).
#include "eagle/util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "eagle/util/log.h"
#include "eagle/util/log_sink.h"

namespace eagle::util {
namespace {

std::uint64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  while (f >> k) {
    if (k == key) {
      std::uint64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 12, '\n');
  }
  return 0;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<std::int64_t>(std::llround(seconds));
  std::int64_t h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
  if (h > 0) return fmt::format("{}h{:02}m{:02}s", h, m, sec);
  if (m > 0) return fmt::format("{}m{:02}s", m, sec);
  return fmt::format("{}s", sec);
}

std::string format_bar(double fraction, int width) {
  const double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(std::floor(f * width));
  std::string bar(static_cast<std::size_t>(width) + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

std::string format_eta(double done, double total, double elapsed_s) {
  if (done <= 0) return "ETA ?";
  return "ETA " + format_duration(elapsed_s / done * std::max(0.0, total - done));
}

std::uint64_t resident_bytes() { return status_kb("VmRSS:"); }
std::uint64_t peak_resident_bytes() { return status_kb("VmHWM:"); }

ProgressDisplay::ProgressDisplay(std::string area, ProgressMode mode, std::FILE* out, double plain_interval_s)
    : area_(std::move(area)), mode_(mode), out_(out), interval_s_(plain_interval_s) {
  if (mode_ == ProgressMode::auto_) mode_ = ::isatty(::fileno(out_)) ? ProgressMode::bar : ProgressMode::plain;
  // Log lines clear the bar before they print and redraw it after.
  if (mode_ == ProgressMode::bar) log::set_console_hooks([this] { clear_bar(); }, [this] { draw_bar(); });
}

ProgressDisplay::~ProgressDisplay() {
  finish();
  if (mode_ == ProgressMode::bar) log::set_console_hooks(nullptr, nullptr);
}

bool ProgressDisplay::due(double elapsed_s, bool final) const {
  switch (mode_) {
    case ProgressMode::bar: return final || last_s_ < 0 || elapsed_s - last_s_ >= kMinRedrawS;
    case ProgressMode::plain: return final || elapsed_s - std::max(0.0, last_s_) >= interval_s_;
    default: return false;
  }
}

bool ProgressDisplay::show(std::string_view bar_line, std::string_view plain_line, double elapsed_s, bool final) {
  if (!due(elapsed_s, final)) return false;
  last_s_ = elapsed_s;
  if (mode_ == ProgressMode::bar) {
    bar_ = std::string(bar_line);
    bar_visible_ = false;  // overdrawn in place
    draw_bar();
  } else {
    log::info(area_, "{}", plain_line);
  }
  return true;
}

void ProgressDisplay::clear_bar() {
  if (!bar_visible_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  bar_visible_ = false;
}

void ProgressDisplay::draw_bar() {
  if (bar_.empty() || bar_visible_) return;
  std::fputs(("\r" + bar_ + "\x1b[K").c_str(), out_);
  std::fflush(out_);
  bar_visible_ = true;
}

void ProgressDisplay::finish() {
  if (mode_ == ProgressMode::bar && bar_visible_) {
    std::fputs("\n", out_);
    std::fflush(out_);
    bar_visible_ = false;
    bar_.clear();
  }
}

ProgressLine::ProgressLine(std::string label, int decimals, int bar_width)
    : label_(std::move(label)), decimals_(decimals), bar_width_(bar_width) {}

ProgressTexts ProgressLine::compose(double fraction, std::string_view text) const {
  return compose(fraction, 100 * fraction, text);
}

ProgressTexts ProgressLine::compose(double fraction, double percent, std::string_view text) const {
  const int width = decimals_ > 0 ? 4 + decimals_ : 3;
  const std::string padded = fmt::format("{:{}.{}f}%", percent, width, decimals_);
  const std::string head = label_.empty() ? "" : label_ + " ";
  return {fmt::format("{}{} {} {}", head, format_bar(fraction, bar_width_), padded, text),
          fmt::format("{}{}: {}", head, percent_text(percent), text)};
}

std::string ProgressLine::percent_text(double percent) const { return fmt::format("{:.{}f}%", percent, decimals_); }

bool ProgressLine::show(ProgressDisplay& display, double fraction, std::string_view text, double elapsed_s,
                        bool final) const {
  const auto t = compose(fraction, text);
  return display.show(t.bar, t.plain, elapsed_s, final);
}

}  // namespace eagle::util
