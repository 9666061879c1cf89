// Console output of the training loop: the fixed-format step line, the evaluation line, and a
// progress bar with ETA redrawn in place on a terminal (plain periodic lines otherwise).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "eagle/io/step_stats.h"
#include "eagle/util/progress.h"

namespace eagle::io {

// "step 120/1000 | loss 2.3456 | acc 0.612 0.480 | tau 2.310 | lr 9.870e-05 | grad 0.812 |
//  12345 tok/s | pad 87.5% | 412 ms/step" (one line; " | 3 non-finite steps skipped" appended
// when nonfinite_steps > 0).
std::string format_step_line(const StepStats& s);
// A loss as the lines print it: "2.3456", or "n/a" when nothing was scored (NaN), never 0.
std::string loss_text(double loss);
// "step 120 AR: 2.875 | eval loss 2.1234 | acc 0.700 0.500 | tau 2.400" ("AR: n/a" when not measured,
// "eval loss n/a" when no held-out position was scored).
std::string format_eval_line(const EvalStats& e);
// "[#########.....................]  30.0% 300/1000 | 1m00s elapsed | ETA 2m20s": `width` cells,
// ETA from the mean step time of the steps this process ran (step - start_step).
std::string format_progress_bar(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step,
                                int width = 30);
// "progress 300/1000 (30.0%) | 1m00s elapsed | ETA 2m20s": the non-terminal form.
std::string format_progress_line(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step);

using util::ProgressMode;

// The progress display of one run (util::ProgressDisplay with the step texts above). In bar mode
// log lines (step lines, eval, checkpoints) print above the bar instead of through it.
class Progress {
 public:
  // start_step: the step the run starts from (the resumed step, else 0), so the ETA counts only
  // steps this process ran.
  Progress(std::int64_t total_steps, std::int64_t start_step, ProgressMode mode = ProgressMode::auto_,
           std::FILE* out = stderr, double plain_interval_s = util::ProgressDisplay::kPlainIntervalS);

  // After each optimizer step. elapsed_s: seconds since the run (this process) started; the
  // overload without it measures from construction. Returns true when something was drawn/logged.
  bool update(std::int64_t step, double elapsed_s);
  bool update(std::int64_t step);
  // The step line and the evaluation line, through log::info("train"/"eval").
  void log_step(const StepStats& s);
  void log_eval(const EvalStats& e);
  // Ends the bar line (also done when destroyed).
  void finish() { display_.finish(); }

  bool is_bar() const { return display_.is_bar(); }
  ProgressMode mode() const { return display_.mode(); }

 private:
  std::int64_t total_, start_;
  util::ProgressDisplay display_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace eagle::io
