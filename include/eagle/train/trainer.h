// `eagle-train train`: the training run from options to a trained, checkpointed head (the loop in
// docs/training.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/run/summary.h"

namespace eagle::train {

// What an in-process caller (a test, a tool) may watch; empty functions are not called.
struct TrainHooks {
  std::function<void(std::int64_t step)> after_step;  // after each optimizer step's periodic work
};

// Runs the whole job and returns its summary, which is also written to output_dir/summary.json on
// every way out once training started (completed, interrupted, gate_missed, failed; a set-up error
// writes none). Every way out but completed then throws eagle::Error: ErrorKind::interrupted after a
// signal (a checkpoint was written), ErrorKind::gate when a CI gate was missed, the failure's own
// error otherwise. A resumed run whose checkpoint ends a completed run returns at once, touching
// nothing.
run::RunSummary train(const config::Options& opts, const std::vector<std::string>& command_line,
                      const TrainHooks& hooks = {});

}  // namespace eagle::train
