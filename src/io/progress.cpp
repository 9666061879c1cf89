// Step line, eval line, progress bar and plain progress lines.
#include "eagle/io/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eagle/io/log.h"
#include "eagle/io/log_sink.h"

namespace eagle::io {

namespace {

std::string join_acc(const std::vector<double>& acc) {
  std::string out;
  for (double a : acc) out += fmt::format("{}{:.3f}", out.empty() ? "" : " ", a);
  return out.empty() ? "-" : out;
}

std::string percent(std::int64_t step, std::int64_t total) {
  double p = total > 0 ? 100.0 * static_cast<double>(step) / static_cast<double>(total) : 0.0;
  return fmt::format("{:5.1f}%", p);
}

std::string eta_text(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step) {
  std::int64_t done = step - start_step;
  if (done <= 0) return "ETA ?";
  double eta = elapsed_s / static_cast<double>(done) * static_cast<double>(std::max<std::int64_t>(0, total - step));
  return "ETA " + format_duration(eta);
}

}  // namespace

std::string format_step_line(const StepStats& s) {
  std::string line = fmt::format(
      "step {}/{} | loss {:.4f} | acc {} | tau {:.3f} | lr {:.3e} | grad {:.3f} | {:.0f} tok/s | pad {:.1f}% | "
      "{:.0f} ms/step",
      s.step, s.total_steps, s.loss, join_acc(s.acc), s.tau, s.lr, s.grad_norm, s.tokens_per_s,
      100.0 * s.padding_efficiency, s.ms_per_step);
  if (s.nonfinite_steps > 0) line += fmt::format(" | {} non-finite steps skipped", s.nonfinite_steps);
  return line;
}

std::string format_eval_line(const EvalStats& e) {
  std::string ar = e.ar ? fmt::format("{:.3f}", *e.ar) : "n/a";
  return fmt::format("step {} AR: {} | eval loss {:.4f} | acc {} | tau {:.3f}", e.step, ar, e.loss, join_acc(e.acc),
                     e.tau);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<std::int64_t>(std::llround(seconds));
  std::int64_t h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
  if (h > 0) return fmt::format("{}h{:02}m{:02}s", h, m, sec);
  if (m > 0) return fmt::format("{}m{:02}s", m, sec);
  return fmt::format("{}s", sec);
}

std::string format_progress_bar(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step,
                                int width) {
  double frac = total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  int filled = static_cast<int>(std::floor(frac * width));
  std::string bar(static_cast<std::size_t>(width) + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return fmt::format("{} {} {}/{} | {} elapsed | {}", bar, percent(step, total), step, total,
                     format_duration(elapsed_s), eta_text(step, total, elapsed_s, start_step));
}

std::string format_progress_line(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step) {
  std::string p = percent(step, total);
  p.erase(0, p.find_first_not_of(' '));
  return fmt::format("progress {}/{} ({}) | {} elapsed | {}", step, total, p, format_duration(elapsed_s),
                     eta_text(step, total, elapsed_s, start_step));
}

Progress::Progress(std::int64_t total_steps, std::int64_t start_step, ProgressMode mode, std::FILE* out,
                   double plain_interval_s)
    : total_(total_steps), start_(start_step), mode_(mode), out_(out), interval_s_(plain_interval_s) {
  if (mode_ == ProgressMode::auto_) mode_ = ::isatty(::fileno(out_)) ? ProgressMode::bar : ProgressMode::plain;
  // Log lines clear the bar before they print and redraw it after.
  if (mode_ == ProgressMode::bar) set_console_hooks([this] { clear_bar(); }, [this] { draw_bar(); });
}

Progress::~Progress() {
  finish();
  if (mode_ == ProgressMode::bar) set_console_hooks(nullptr, nullptr);
}

void Progress::clear_bar() {
  if (!bar_visible_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  bar_visible_ = false;
}

void Progress::draw_bar() {
  if (bar_.empty() || bar_visible_) return;
  std::fputs(("\r" + bar_ + "\x1b[K").c_str(), out_);
  std::fflush(out_);
  bar_visible_ = true;
}

bool Progress::update(std::int64_t step, double elapsed_s) {
  switch (mode_) {
    case ProgressMode::bar:
      // Fast steps would redraw thousands of times a second; a few times a second is enough.
      if (step < total_ && last_draw_s_ >= 0 && elapsed_s - last_draw_s_ < kMinRedrawS) return false;
      last_draw_s_ = elapsed_s;
      bar_ = format_progress_bar(step, total_, elapsed_s, start_);
      bar_visible_ = false;  // overdrawn in place
      draw_bar();
      return true;
    case ProgressMode::plain:
      if (step < total_ && elapsed_s - last_plain_s_ < interval_s_) return false;
      last_plain_s_ = elapsed_s;
      log::info("train", "{}", format_progress_line(step, total_, elapsed_s, start_));
      return true;
    default: return false;
  }
}

bool Progress::update(std::int64_t step) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return update(step, elapsed);
}

void Progress::log_step(const StepStats& s) { log::info("train", "{}", format_step_line(s)); }
void Progress::log_eval(const EvalStats& e) { log::info("eval", "{}", format_eval_line(e)); }

void Progress::finish() {
  if (mode_ == ProgressMode::bar && bar_visible_) {
    std::fputs("\n", out_);
    std::fflush(out_);
    bar_visible_ = false;
    bar_.clear();
  }
}

}  // namespace eagle::io
