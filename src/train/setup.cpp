// Data, target and head set-up of train and eval (see setup.h).
#include "eagle/train/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/data/loader.h"
#include "eagle/model/draft_vocab.h"
#include "eagle/model/head_io.h"
#include "eagle/train/runtime.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "offline_inputs.h"

namespace eagle::train {
namespace {

// eval_data_path, whole, when given; else the validation split of data_path as loaded.
std::optional<data::Dataset> heldout_split(const config::Options& opts, std::int64_t vocab_size,
                                           std::optional<data::Dataset> validation) {
  if (opts.eval_data_path.empty()) return validation;
  auto lo = data::LoadOptions::from(opts);
  lo.validation_fraction = 0;
  lo.vocab_size = vocab_size;
  return data::load_dataset(opts.eval_data_path, lo).train;
}

}  // namespace

TrainData load_train_data(const config::Options& opts, std::int64_t vocab_size) {
  auto lo = data::LoadOptions::from(opts);
  lo.vocab_size = vocab_size;
  auto loaded = data::load_dataset(opts.data_path, lo);
  TrainData out{std::move(loaded.train), heldout_split(opts, vocab_size, std::move(loaded.validation))};
  EAGLE_CHECK(out.train.size() > 0,
              Error(ErrorKind::input, "the training data holds no usable sample").file(opts.data_path));
  log::info("data", "training samples: {} ({} tokens, {} trained); held-out samples: {}", out.train.size(),
            out.train.stats().tokens, out.train.stats().trained_tokens, out.heldout ? out.heldout->size() : 0);
  return out;
}

data::Dataset load_eval_data(const config::Options& opts, std::int64_t vocab_size) {
  if (!opts.eval_data_path.empty()) return *heldout_split(opts, vocab_size, std::nullopt);
  auto lo = data::LoadOptions::from(opts);
  lo.vocab_size = vocab_size;
  auto loaded = data::load_dataset(opts.data_path, lo);
  if (auto heldout = heldout_split(opts, vocab_size, std::move(loaded.validation))) return std::move(*heldout);
  log::info("eval", "{} has no validation split: evaluating on all of it", opts.data_path);
  return std::move(loaded.train);
}

model::TargetModel load_target(const config::Options& opts, torch::Device device) {
  auto target = model::TargetModel::load(opts.model_name_or_path, target_dtype(opts.target_dtype), device);
  if (!opts.aux_hidden_state_layer_ids.empty()) target.set_aux_layer_ids(opts.aux_hidden_state_layer_ids);
  const auto& c = target.config();
  log::info("model", "target {}: {} layers, hidden {}, vocabulary {}, {} parameters, aux layers [{}]", c.architecture,
            c.num_hidden_layers, c.hidden_size, c.vocab_size, target.parameter_count(),
            fmt::join(target.aux_layer_ids(), ", "));
  return target;
}

std::unique_ptr<FeatureSource> RunInputs::features(bool heldout, const model::TeacherSpec& teacher,
                                                   torch::Device device) const {
  if (!store) return online_features(*target, teacher);
  return offline_features(store, heldout ? heldout_samples : train_samples, ends, teacher, device);
}

RunInputs load_run_inputs(const config::Options& opts, torch::Device device, Purpose purpose) {
  if (!opts.features_path.empty()) return load_offline_inputs(opts, device, purpose == Purpose::eval);
  // The data is checked against the target's vocabulary (its config.json) before the weights load.
  const auto vocab_size = model::TargetConfig::from_model_dir(opts.model_name_or_path).vocab_size;
  TrainData data;
  if (purpose == Purpose::train) data = load_train_data(opts, vocab_size);
  else data.heldout = load_eval_data(opts, vocab_size);
  RunInputs in = online_inputs(load_target(opts, device), opts.model_name_or_path);
  in.data = std::move(data);
  return in;
}

RunInputs online_inputs(model::TargetModel target, std::string target_name) {
  RunInputs in;
  in.ends = target.ends();
  in.aux_layer_ids = target.aux_layer_ids();
  in.target = std::move(target);
  in.target_name = std::move(target_name);
  return in;
}

std::shared_ptr<model::DraftHead> make_head(const config::Options& opts, const RunInputs& inputs,
                                            const data::TokenStats& stats, torch::Device device) {
  const auto& tc = inputs.ends.config;
  const auto counts = stats.trained_token_counts.entries();
  const auto vocab = model::build_draft_vocab(counts, tc.vocab_size, std::min(opts.draft_vocab_size, tc.vocab_size));
  auto cfg = model::HeadConfig::from_target(tc, opts.eagle_version, inputs.aux_layer_ids, vocab.size());
  cfg.ttt_steps = opts.ttt_steps;
  cfg.ttt_loss_decay = opts.ttt_loss_decay;
  cfg.target_name_or_path = inputs.target_name;
  cfg.target_architecture = tc.architecture;
  auto head = model::make_head(cfg, vocab);
  head->module().to(device);
  head->init_from_target(inputs.ends.embed, inputs.ends.lm_head);
  if (cfg.eagle_version == 3) {
    std::uint64_t covered = 0;
    for (auto id : vocab.draft_ids) covered += stats.trained_token_counts.count(static_cast<data::TokenId>(id));
    log::info(
        "model", "draft vocabulary: {} of {} target ids ({:.1f}% of trained tokens covered)", vocab.size(),
        tc.vocab_size,
        stats.trained_tokens ? 100.0 * static_cast<double>(covered) / static_cast<double>(stats.trained_tokens) : 0.0);
  }
  return head;
}

}  // namespace eagle::train
