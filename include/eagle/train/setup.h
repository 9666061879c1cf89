// The draft head of a run, built for its inputs (the target's ends and config, the aux layers, the
// trained tokens of the data).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/features/inputs.h"
#include "eagle/head/head.h"

namespace eagle::train {

// A new draft head for this target and its training data (inputs.train): EAGLE-3 with a draft
// vocabulary of the most frequent trained tokens (LM head started from the target's rows), or
// EAGLE-1; on the device, fp32.
std::shared_ptr<head::DraftHead> make_head(const config::Options& opts, const features::RunInputs& inputs,
                                           torch::Device device);

}  // namespace eagle::train
