// Learning-rate schedules: linear warmup from 0, then cosine to 0, linear to 0 or constant; the
// same numbers as Hugging Face's get_cosine_schedule_with_warmup (num_cycles 0.5),
// get_linear_schedule_with_warmup and get_constant_schedule_with_warmup.
#pragma once

#include <cstdint>

#include "eagle/config/options.h"

namespace eagle::run {

struct LrSchedule {
  config::LrScheduler type = config::LrScheduler::cosine;
  double peak_lr = 0.0;             // learning_rate
  std::int64_t warmup_steps = 0;    // optimizer steps
  std::int64_t total_steps = 0;     // optimizer steps of the whole run

  // The factor on peak_lr for the optimizer step taken after `completed` steps (0 for the first
  // step), as Hugging Face's LambdaLR gives it: lambda(completed).
  double multiplier(std::int64_t completed) const;
  double lr(std::int64_t completed) const { return peak_lr * multiplier(completed); }
};

LrSchedule make_lr_schedule(const config::Options& opts, std::int64_t total_steps);

}  // namespace eagle::run
