// The draft head of a run, built for its inputs (the target's ends and config, the aux layers, the
// trained tokens of the data).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/features/inputs.h"
#include "eagle/head/draft_spec.h"

namespace eagle::train {

// The head settings of a run whose inputs are loaded: the options', the aux layers and the target's
// name as the inputs resolved them.
head::HeadSettings head_settings(const config::Options& opts, const features::RunInputs& inputs);

// A new draft head of the options' kind (its row of the draft table) for this target and its training
// data (inputs.train): configured, its recompute mode resolved where the row asks, made on the device
// in fp32 (a reduced draft vocabulary from the trained tokens where the row has one).
std::shared_ptr<head::DraftHead> make_head(const config::Options& opts, const features::RunInputs& inputs,
                                           torch::Device device);

}  // namespace eagle::train
