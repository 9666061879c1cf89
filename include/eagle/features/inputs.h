// Everything a run reads besides its options, each built in one place: the data and its held-out
// split, the frozen target (checked against the data's vocabulary) or the stored features that stand
// in for it (a dump-features or speculators folder, --features_path: docs/offline.md), and where the
// head's inputs of each split come from.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/features/source.h"
#include "eagle/features/store.h"
#include "eagle/head/draft_spec.h"
#include "eagle/target/target.h"

namespace eagle::features {

// The training data of a run and its held-out split: eval_data_path when given, else the
// validation split of data_path (stored by prepare, or validation_fraction of it); none else.
struct TrainData {
  data::Dataset train;
  std::optional<data::Dataset> heldout;
};
// Every token id must index the target's vocabulary (vocab_size) and none be one of its media
// placeholders (media_tokens; JSON data is refused by file and line, prepared data by file, sample
// and position), checked while loading, before the weights.
TrainData load_train_data(const config::Options& opts, const target::TargetConfig& target);

// Where the head's inputs of each split come from (built once, for the head's teacher).
struct FeatureSources {
  std::unique_ptr<FeatureSource> train, heldout;  // each only where the inputs have that split
};

// Everything a run reads besides its options: the data, the target or the stored features that
// stand in for it, and what the head is built from.
struct RunInputs {
  std::optional<data::Dataset> train;            // train: the training data; eval: none
  std::optional<data::Dataset> heldout;          // train: the held-out split, if any; eval: the data evaluated
  std::optional<target::TargetModel> target;     // the whole target: online; offline only for the AR
  target::TargetEnds ends;                       // the head's embedding; the teacher's final norm, LM head
  std::vector<std::int64_t> aux_layer_ids;       // the target layers the head fuses (EAGLE-3)
  std::string target_name;                       // the target the head names in its exports
  std::shared_ptr<const FeatureStore> store;     // offline and target_server (ServerFeatures) only
  std::vector<std::int64_t> train_samples, heldout_samples;  // offline: the store's sample of each row
  // Offline, --draft mtp: the stored last hidden state is the head's aux feature (source.h).
  LastAsAux last_as_aux = LastAsAux::none;

  FeatureSources sources(const target::TeacherSpec& teacher, torch::Device device) const;
};
// The inputs of a run with this target in the step (no data: the caller adds it).
RunInputs online_inputs(target::TargetModel target, std::string target_name);

// Which split a command reads: train the training data and its held-out split, eval the held-out data
// (eval_data_path, else data_path's validation split, else all of data_path or of the folder's samples).
enum class Split { train, eval };

// The one loader of a run's inputs for a head that reads `needs` (its row's plan for a new head, its
// reads for a loaded one; head/draft_spec.h), from any source. Online (no features_path): the data, checked
// against the target's vocabulary before its weights load, and the target with the aux layers read.
// Offline: the data and features of a dump-features or speculators folder, the target's ends only (from
// model_name_or_path, else the folder's copy) and the whole target only when the AR is measured
// (eval_num_prompts > 0 and model_name_or_path given; else logged as skipped). With target_server: the
// servers are checked (/health, /v1/models), the data loaded as online (samples longer than the
// servers' max_model_len - 1 follow overlong_policy), the features of its samples requested from the
// servers (ServerFeatures), the target's ends read from model_name_or_path.
// needs.last_pre_norm: aux id L before the final norm, as vLLM's aux states (stored features, which hold
// it after the norm, are refused for it). needs.last_as_aux: the target's last hidden state is the one
// aux feature (id L), online, stored (LastAsAux) or served.
RunInputs load_inputs(const config::Options& opts, const head::FeatureNeeds& needs, torch::Device device, Split split);
// The inputs of `train`: load_inputs for what the options' new head will read (its row's plan).
RunInputs load_train_inputs(const config::Options& opts, torch::Device device);

// The folder holding the target's config.json for these options: model_name_or_path when given,
// else the copy of a dump-features folder (features_path); empty when neither has one.
std::string target_config_dir(const config::Options& opts);

}  // namespace eagle::features
