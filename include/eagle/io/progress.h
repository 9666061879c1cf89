// Console output of the training loop: the fixed-format step line, the evaluation line, and a
// progress bar with ETA redrawn in place on a terminal (plain periodic lines otherwise).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "eagle/io/step_stats.h"

namespace eagle::io {

// "step 120/1000 | loss 2.3456 | acc 0.612 0.480 | tau 2.310 | lr 9.870e-05 | grad 0.812 |
//  12345 tok/s | pad 87.5% | 412 ms/step" (one line; " | 3 non-finite steps skipped" appended
// when nonfinite_steps > 0).
std::string format_step_line(const StepStats& s);
// "step 120 AR: 2.875 | eval loss 2.1234 | acc 0.700 0.500 | tau 2.400" ("AR: n/a" when not measured).
std::string format_eval_line(const EvalStats& e);
// "42s", "5m07s", "1h02m03s"; "?" for a negative or non-finite duration.
std::string format_duration(double seconds);
// "[#########.....................]  30.0% 300/1000 | 1m00s elapsed | ETA 2m20s": `width` cells,
// ETA from the mean step time of the steps this process ran (step - start_step).
std::string format_progress_bar(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step,
                                int width = 30);
// "progress 300/1000 (30.0%) | 1m00s elapsed | ETA 2m20s": the non-terminal form.
std::string format_progress_line(std::int64_t step, std::int64_t total, double elapsed_s, std::int64_t start_step);

enum class ProgressMode {
  auto_,  // bar when stderr is a terminal (isatty), plain lines otherwise
  bar,    // redrawn in place with "\r" + ESC[K (at most 5 times a second, and at the last step);
          // every log line clears and redraws it
  plain,  // a progress line through the log every plain_interval_s seconds and at the end
  off,
};

// The progress display of one run. In bar mode it hooks the console log sink so that log lines
// (step lines, eval, checkpoints) print above the bar instead of through it.
class Progress {
 public:
  // start_step: the step the run starts from (the resumed step, else 0), so the ETA counts only
  // steps this process ran.
  Progress(std::int64_t total_steps, std::int64_t start_step, ProgressMode mode = ProgressMode::auto_,
           std::FILE* out = stderr, double plain_interval_s = 30.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // After each optimizer step. elapsed_s: seconds since the run (this process) started; the
  // overload without it measures from construction. Returns true when something was drawn/logged.
  bool update(std::int64_t step, double elapsed_s);
  bool update(std::int64_t step);
  // The step line and the evaluation line, through log::info("train"/"eval").
  void log_step(const StepStats& s);
  void log_eval(const EvalStats& e);
  // Ends the bar line (called by the destructor).
  void finish();

  bool is_bar() const { return mode_ == ProgressMode::bar; }
  ProgressMode mode() const { return mode_; }

 private:
  void clear_bar();
  void draw_bar();
  std::int64_t total_, start_;
  ProgressMode mode_;
  std::FILE* out_;
  double interval_s_;
  static constexpr double kMinRedrawS = 0.2;
  double last_plain_s_ = 0.0;   // elapsed_s of the last plain line
  double last_draw_s_ = -1.0;   // elapsed_s of the last bar drawn; < 0: none yet
  std::string bar_;          // the bar as last drawn; empty: nothing on screen
  bool bar_visible_ = false;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace eagle::io
