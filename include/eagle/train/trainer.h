// `eagle-train train`: the training run from options to a trained, checkpointed head (the loop in
// docs/training.md).
#pragma once

#include <string>
#include <vector>

#include "eagle/config/options.h"

namespace eagle::train {

// Runs the whole job. Throws eagle::Error on failure; ErrorKind::interrupted after a signal (a
// checkpoint was written), ErrorKind::gate when a CI gate was missed (summary.json is written in
// every case).
void train(const config::Options& opts, const std::vector<std::string>& command_line);

}  // namespace eagle::train
