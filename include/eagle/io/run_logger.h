// The logging sinks of one training run behind one object: the console (step line, eval line,
// progress bar), output_dir/metrics.jsonl and TensorBoard events in output_dir, all fed the same
// StepStats/EvalStats so they log the same numbers under the same names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "eagle/io/metrics_log.h"
#include "eagle/io/progress.h"
#include "eagle/io/step_stats.h"
#include "eagle/io/tensorboard.h"

namespace eagle::io {

class RunLogger {
 public:
  // resumed_step: the checkpoint step a resumed run starts from (metrics.jsonl keeps the lines up
  // to it; TensorBoard's session start is at resumed_step + 1, so the steps done again replace the
  // interrupted attempt's); empty for a fresh run.
  RunLogger(const std::filesystem::path& output_dir, std::int64_t total_steps,
            std::optional<std::int64_t> resumed_step, ProgressMode mode = ProgressMode::auto_);

  // After every optimizer step: redraws the bar / prints a plain progress line when due.
  void on_step(std::int64_t step) { progress_.update(step); }
  // Every logging_steps: the step line, one metrics.jsonl object and the train/* scalars. When
  // the same step was also evaluated, pass it: its fields join the same JSON object.
  void log_step(const StepStats& s, const EvalStats* eval = nullptr);
  // An evaluation at a step that is not logged otherwise (e.g. the final one).
  void log_eval(const EvalStats& e);
  // Ends the bar line before the final messages.
  void finish() { progress_.finish(); }

 private:
  MetricsLog metrics_;
  TensorBoardWriter tensorboard_;
  Progress progress_;
};

}  // namespace eagle::io
