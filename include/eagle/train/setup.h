// What train and eval set up alike, each built in one place: the data and its held-out split, the
// frozen target (checked against the data's vocabulary), and the draft head for them.
#pragma once

#include <memory>
#include <optional>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/model/head.h"
#include "eagle/model/target.h"

namespace eagle::train {

// The training data of a run and its held-out split: eval_data_path when given, else the
// validation split of data_path (stored by prepare, or validation_fraction of it); none else.
struct TrainData {
  data::Dataset train;
  std::optional<data::Dataset> heldout;
};
// Every token id must index the target's vocabulary (vocab_size; JSON data is refused by file and
// line, prepared data by file, sample and position), checked while loading, before the weights.
TrainData load_train_data(const config::Options& opts, std::int64_t vocab_size);
// The held-out data of `eval`: the same choice as training, else data_path whole.
data::Dataset load_eval_data(const config::Options& opts, std::int64_t vocab_size);

// Loads the target (dtype, device, aux layers from the options) and logs what it is.
model::TargetModel load_target(const config::Options& opts, torch::Device device);

// A new draft head for this target and data: EAGLE-3 with a draft vocabulary of the most frequent
// trained tokens (LM head started from the target's rows), or EAGLE-1; on the device, fp32.
std::shared_ptr<model::DraftHead> make_head(const config::Options& opts, const model::TargetModel& target,
                                            const data::TokenStats& stats, torch::Device device);

}  // namespace eagle::train
