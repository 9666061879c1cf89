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
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::head {
struct DFlashSettings;  // eagle/head/dflash_head.h
}  // namespace eagle::head

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

// The inputs of `train`. Online (no features_path): the data, checked against the target's
// vocabulary before its weights load, and the target with the options' aux layers. Offline: the
// data and features of a dump-features or speculators folder, the target's ends only (from
// model_name_or_path, else the folder's copy) and the whole target only when the AR is measured
// (eval_num_prompts > 0 and model_name_or_path given; else logged as skipped). With target_server:
// the servers are checked (/health, /v1/models), the data loaded as online (samples longer than the
// servers' max_model_len - 1 follow overlong_policy), the features of its samples requested from the
// servers (ServerFeatures), the target's ends read from model_name_or_path.
RunInputs load_train_inputs(const config::Options& opts, torch::Device device);
// The inputs of `eval` for a head of this version reading these target layers (its own, not the
// options'): the held-out data as training chooses it, else data_path (or the folder's samples)
// whole; the target or the features as for training.
// mtp_head: an MTP head's (--draft mtp): aux id L is the target's last hidden state, before or after
// its final norm as the target's MTP family reads it (target::TargetModel::set_last_aux_pre_norm online;
// offline the stored last hidden state, LastAsAux), from any of the three sources (inputs_drafts.cpp).
RunInputs load_eval_inputs(const config::Options& opts, torch::Device device, std::int64_t eagle_version,
                           const std::vector<std::int64_t>& aux_layer_ids, bool mtp_head = false);

// The folder holding the target's config.json for these options: model_name_or_path when given,
// else the copy of a dump-features folder (features_path); empty when neither has one.
std::string target_config_dir(const config::Options& opts);

// --draft dflash (docs/heads.md): its settings from the options and the target, and the target layers
// it reads, online, from stored features or from vLLM servers.
// The DFlash settings of these options for this target: draft_num_layers 0 is 5, mask_token_id -1
// the target's first end-of-sequence id (Error(usage) naming mask_token_id when it has none).
head::DFlashSettings dflash_settings(const config::Options& opts, const target::TargetConfig& target);

// The inputs of a DFlash head that reads aux_layer_ids (DFlash target layer t is aux id t + 1; the
// train inputs: head::dflash_config_from_target's, eval: the loaded head's). Online: the target with
// those aux layers, aux id L (t = L - 1) taken before the final norm as vLLM does. features_path:
// the dump's aux layers must be these (dump-features --aux_hidden_state_layer_ids t + 1 ...), and
// t = L - 1 is refused (a dump stores the HF convention, normed); speculators folders as for
// EAGLE-3. target_server: vLLM started with eagle_aux_hidden_state_layer_ids = these ids.
RunInputs load_dflash_inputs(const config::Options& opts, torch::Device device,
                             const std::vector<std::int64_t>& aux_layer_ids, bool eval);

// The train inputs of --draft dflash: load_dflash_inputs with the aux ids of the head the options
// build for the target (its config.json read first; every DFlash option checked there, by name).
RunInputs load_dflash_train_inputs(const config::Options& opts, torch::Device device);

}  // namespace eagle::features
