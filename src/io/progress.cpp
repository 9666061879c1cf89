// Step line, eval line, progress bar and plain progress lines.
#include "eagle/io/progress.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eagle/util/log.h"

namespace eagle::io {

namespace {

std::string join_acc(const std::vector<double>& acc) {
  std::string out;
  for (double a : acc) out += fmt::format("{}{:.3f}", out.empty() ? "" : " ", a);
  return out.empty() ? "-" : out;
}

double percent(std::int64_t step, std::int64_t total) {
  return total > 0 ? 100.0 * static_cast<double>(step) / static_cast<double>(total) : 0.0;
}

// "| 1m00s elapsed | ETA 2m20s", the ETA from the steps this process ran.
std::string timing(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step) {
  return fmt::format(
      "| {} elapsed | {}", util::format_duration(elapsed_s),
      util::format_eta(static_cast<double>(step - start_step), static_cast<double>(total - start_step), elapsed_s));
}

}  // namespace

std::string loss_text(double loss) { return std::isfinite(loss) ? fmt::format("{:.4f}", loss) : "n/a"; }

std::string format_step_line(const StepStats& s) {
  std::string line = fmt::format(
      "step {}/{} | loss {} | acc {} | tau {:.3f} | lr {:.3e} | grad {:.3f} | {:.0f} tok/s | pad {:.1f}% | "
      "{:.0f} ms/step",
      s.step, s.total_steps, loss_text(s.loss), join_acc(s.acc), s.tau, s.lr, s.grad_norm, s.tokens_per_s,
      100.0 * s.padding_efficiency, s.ms_per_step);
  if (s.tflops) line += fmt::format(" | {:.3g} TFLOP/s", *s.tflops);
  if (s.mfu) line += fmt::format(" | MFU {:.1f}%", 100.0 * *s.mfu);
  if (s.nonfinite_steps > 0) line += fmt::format(" | {} non-finite steps skipped", s.nonfinite_steps);
  return line;
}

std::string format_eval_line(const EvalStats& e) {
  std::string ar = e.acceptance.ar ? fmt::format("{:.3f}", *e.acceptance.ar) : "n/a";
  std::string line = fmt::format("step {} AR: {} | eval loss {} | acc {} | tau {:.3f}", e.step, ar,
                                 loss_text(e.loss), join_acc(e.acc), e.tau);
  if (!e.acceptance.ar_by_depth.empty())
    line += fmt::format(" | AR by depth k = 1..{}: {}", e.acceptance.ar_by_depth.size(),
                        join_acc(e.acceptance.ar_by_depth));
  return line;
}

std::string format_progress_bar(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step,
                                int width) {
  double frac = total > 0 ? static_cast<double>(step) / static_cast<double>(total) : 0.0;
  const auto text = fmt::format("{}/{} {}", step, total, timing(step, total, elapsed_s, start_step));
  return util::ProgressLine("", 1, width).compose(frac, percent(step, total), text).bar;
}

std::string format_progress_line(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step) {
  // The step count before the percentage (the line docs/training.md shows), so not the composer's plain form.
  const auto pct = util::ProgressLine("progress", 1).percent_text(percent(step, total));
  return fmt::format("progress {}/{} ({}) {}", step, total, pct, timing(step, total, elapsed_s, start_step));
}

Progress::Progress(std::int64_t total_steps, std::int64_t start_step, ProgressMode mode, std::FILE* out,
                   double plain_interval_s)
    : total_(total_steps), start_(start_step), display_("train", mode, out, plain_interval_s) {}

bool Progress::update(std::int64_t step, double elapsed_s) {
  const bool final = step >= total_;
  if (!display_.due(elapsed_s, final)) return false;
  return display_.show(format_progress_bar(step, total_, elapsed_s, start_),
                       format_progress_line(step, total_, elapsed_s, start_), elapsed_s, final);
}

bool Progress::update(std::int64_t step) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return update(step, elapsed);
}

void Progress::log_step(const StepStats& s) { log::info("train", "{}", format_step_line(s)); }
void Progress::log_eval(const EvalStats& e) { log::info("eval", "{}", format_eval_line(e)); }

}  // namespace eagle::io
