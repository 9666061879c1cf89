// Learning-rate schedules with the formulas of Hugging Face transformers' optimization.py.
#include "eagle/run/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace eagle::run {

double LrSchedule::multiplier(std::int64_t completed) const {
  auto step = static_cast<double>(completed);
  auto warmup = static_cast<double>(warmup_steps);
  auto total = static_cast<double>(total_steps);
  if (completed < warmup_steps) return step / std::max(1.0, warmup);
  switch (type) {
    case config::LrScheduler::constant: return 1.0;
    case config::LrScheduler::linear: return std::max(0.0, (total - step) / std::max(1.0, total - warmup));
    case config::LrScheduler::cosine: {
      double progress = (step - warmup) / std::max(1.0, total - warmup);
      constexpr double num_cycles = 0.5;
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
    }
  }
  return 1.0;
}

LrSchedule make_lr_schedule(const config::Options& opts, std::int64_t total_steps) {
  return LrSchedule{opts.lr_scheduler_type, opts.learning_rate, opts.warmup_steps, total_steps};
}

}  // namespace eagle::run
