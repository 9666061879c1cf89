// The parts of a run's inputs that inputs.cpp (the one loader, offline and server inputs) shares with
// inputs_last_state.cpp (a head reading the target's last hidden state). Private to src/features.
#pragma once

#include <cstdint>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/features/inputs.h"
#include "eagle/target/target.h"

namespace eagle::features::detail {

// A dump-features or speculators folder (features_path) as the run's inputs.
RunInputs load_offline_inputs(const config::Options& o, const head::FeatureNeeds& head, torch::Device device, bool eval);
// The held-out data of `eval`: the same choice as training, else data_path whole.
data::Dataset load_eval_data(const config::Options& opts, const target::TargetConfig& target);
// Features from vLLM servers (target_server).
RunInputs open_server(const config::Options& o, const head::FeatureNeeds& head, torch::Device device, bool eval);
// The split's data as `train` and `eval` read it, written once: eval the held-out data only, train the
// training data and its held-out split.
void add_data(RunInputs& in, const config::Options& opts, const target::TargetConfig& target, bool eval);
// The target's last hidden state the one aux feature (FeatureNeeds::last_as_aux), online, stored or served
// (inputs_last_state.cpp).
RunInputs load_last_state_inputs(const config::Options& o, const head::FeatureNeeds& needs, torch::Device device,
                                 bool eval);

}  // namespace eagle::features::detail
