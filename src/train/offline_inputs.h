// The inputs of a run that trains from stored features (--features_path): opening a dump-features
// or speculators folder with its data, its held-out split and the target's ends (setup.h).
#pragma once

#include "eagle/train/setup.h"

namespace eagle::train {

// See load_run_inputs (setup.h). eval: data.heldout is the folder's validation split (or
// validation_fraction of it), else all of it.
RunInputs load_offline_inputs(const config::Options& opts, torch::Device device, bool eval);

}  // namespace eagle::train
