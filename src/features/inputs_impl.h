// The parts of a run's inputs that inputs.cpp (the EAGLE heads', offline and server inputs) shares with
// inputs_drafts.cpp (the MTP and DFlash heads'). Private to src/features.
#pragma once

#include <cstdint>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/features/inputs.h"
#include "eagle/target/target.h"

namespace eagle::features::detail {

// What the head reads of the target: train, the options' head; eval, the loaded head's.
struct HeadReads {
  std::int64_t eagle_version = 3;
  std::vector<std::int64_t> aux_layer_ids;  // empty: the default (or, offline, the stored) ones
};

// A dump-features or speculators folder (features_path) as the run's inputs.
RunInputs load_offline_inputs(const config::Options& o, const HeadReads& head, torch::Device device, bool eval);
// The held-out data of `eval`: the same choice as training, else data_path whole.
data::Dataset load_eval_data(const config::Options& opts, const target::TargetConfig& target);
// Features from vLLM servers (target_server).
RunInputs open_server(const config::Options& o, const HeadReads& head, torch::Device device, bool eval);
// --draft mtp: the target's last hidden state the one aux feature, online, stored or served (inputs_drafts.cpp).
RunInputs load_mtp_inputs(const config::Options& o, torch::Device device, bool eval);

}  // namespace eagle::features::detail
