// A run's inputs (see inputs.h): the data and the target online; offline, a dump-features folder
// (its manifest, prepared data and shards) or a speculators folder (its Arrow rows and hidden-state
// files) with the target's ends; vLLM servers. A head whose one aux feature is the target's last hidden
// state (MTP): inputs_last_state.cpp.
#include "eagle/features/inputs.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/data/binary_format.h"
#include "eagle/data/flat_builder.h"
#include "eagle/data/loader.h"
#include "eagle/data/speculators_folder.h"
#include "eagle/device/distributed.h"
#include "eagle/features/server_files.h"
#include "eagle/features/server_store.h"
#include "eagle/features/target_identity.h"
#include "eagle/config/option_table.h"
#include "eagle/model/dtype.h"
#include "eagle/run/signals.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "inputs_impl.h"

namespace eagle::features {
namespace {

namespace fs = std::filesystem;
using head::FeatureNeeds;

// The run's loading options against this target: ids below its vocabulary, none of its media placeholders.
data::LoadOptions checked_against(const config::Options& opts, const target::TargetConfig& target) {
  auto lo = data::LoadOptions::from(opts);
  lo.vocab_size = target.vocab_size;
  lo.media_tokens = target.media_tokens;
  return lo;
}

// eval_data_path, whole, when given; else the validation split of data_path as loaded.
std::optional<data::Dataset> heldout_split(const config::Options& opts, const target::TargetConfig& target,
                                           std::optional<data::Dataset> validation) {
  if (opts.eval_data_path.empty()) return validation;
  auto lo = checked_against(opts, target);
  lo.validation_fraction = 0;
  return data::load_dataset(opts.eval_data_path, lo).train;
}

// Data with no position to train would run every step at loss n/a and end with exit 0 and an
// untrained head; refused before anything is built.
void check_trainable(const data::Dataset& ds) {
  EAGLE_CHECK(data::has_trainable_position(ds),
              Error(ErrorKind::input, "the training data has no trainable position")
                  .file(ds.source())
                  .expected(fmt::format("a sample with a trained token (loss_mask 1) at position {} or later: the "
                                        "head predicts a token from the ones before it",
                                        data::kFirstTrainablePosition))
                  .found(fmt::format("{} samples, {} trained tokens, none at a trainable position", ds.size(),
                                     ds.stats().trained_tokens))
                  .hint("check the loss masks (eagle-train data-stats counts the trained tokens)"));
}

std::vector<std::int64_t> pick(const std::vector<std::int64_t>& ids, const std::vector<std::size_t>& at) {
  std::vector<std::int64_t> out;
  out.reserve(at.size());
  for (auto i : at) out.push_back(ids[i]);
  return out;
}

// The run's data from a folder's samples (ids: the store's sample of each) and its stored
// validation split, if any: validation_fraction of the samples is held out when none is stored;
// eval reads the held-out split, else all samples.
void set_data(RunInputs& in, data::Dataset all, std::vector<std::int64_t> all_ids, std::optional<data::Dataset> val,
              std::vector<std::int64_t> val_ids, const config::Options& o, bool eval) {
  if (!val) {
    const std::string source = all.source();
    auto s = data::split_dataset(std::move(all), o.validation_fraction, static_cast<std::uint64_t>(o.seed), source);
    if (s.validation) {
      val = std::move(s.validation);
      val_ids = pick(all_ids, s.indices.validation);
      all_ids = pick(all_ids, s.indices.train);
    }
    all = std::move(s.train);
  }
  if (eval) {
    const bool split = val.has_value();
    in.heldout = split ? std::move(*val) : std::move(all);
    in.heldout_samples = split ? std::move(val_ids) : std::move(all_ids);
    if (!split) log::info("eval", "{} has no validation split: evaluating on all of it", in.store->source());
    return;
  }
  EAGLE_CHECK(all.size() > 0, Error(ErrorKind::input, "the features hold no training sample").file(in.store->source()));
  check_trainable(all);
  in.train = std::move(all);
  in.train_samples = std::move(all_ids);
  in.heldout = std::move(val);
  in.heldout_samples = std::move(val_ids);
}

// The target: whole when the AR is measured (eval_num_prompts > 0 and model_name_or_path given),
// else only its ends, read from ends_dir.
void load_target_part(const config::Options& o, torch::Device device, const std::string& ends_dir, RunInputs& in) {
  if (o.eval_num_prompts > 0 && !o.model_name_or_path.empty()) {
    in.target = target::load_target(o, device, in.aux_layer_ids);
    in.ends = in.target->ends();
    return;
  }
  in.ends = target::TargetModel::load_ends(ends_dir, model::target_dtype(o.target_dtype), device);
  if (o.eval_num_prompts > 0)
    log::info("eval",
              "no --model_name_or_path: the acceptance rate (AR) is not measured (it decodes with the "
              "target); evaluations report the held-out loss, acc and tau of the stored features");
}

RunInputs open_dumped(const config::Options& o, const FeatureNeeds& head, torch::Device device, bool eval) {
  const std::string& dir = o.features_path;
  const auto m = read_manifest(dir);
  const auto manifest_file = (fs::path(dir) / kFeaturesManifest).string();
  EAGLE_CHECK(m.complete, Error(ErrorKind::input, "the features folder is incomplete (its dump did not finish)")
                              .file(manifest_file)
                              .place("complete")
                              .hint("run the same dump-features command again: it continues where it stopped"));
  EAGLE_CHECK(head.aux_layer_ids.empty() || head.aux_layer_ids == m.aux_layer_ids,
              Error(ErrorKind::usage, "the features hold other target layers")
                  .place("aux_hidden_state_layer_ids")
                  .expected(fmt::format("[{}] (the dump's) or none", fmt::join(m.aux_layer_ids, ", ")))
                  .found(fmt::format("[{}]", fmt::join(head.aux_layer_ids, ", "))));
  EAGLE_CHECK(!head.aux_hidden || m.layout.aux_width > 0,
              Error(ErrorKind::usage, "an EAGLE-3 head needs aux features; these were dumped for EAGLE-1")
                  .file(manifest_file)
                  .hint("dump the features again with --eagle_version 3"));
  RunInputs in;
  in.aux_layer_ids = head.aux_hidden ? m.aux_layer_ids : std::vector<std::int64_t>{};
  load_target_part(o, device, target_config_dir(o), in);
  const auto& c = in.ends.config;
  if (!o.model_name_or_path.empty()) {
    // Another target (or another fine-tune of it) would train the head against the wrong teacher.
    check_same_target(m.target, target_identity(o.model_name_or_path, o.model_name_or_path, c), manifest_file,
                      /*with_path=*/false,
                      "give the target the features were dumped from, or none (the folder "
                      "holds its ends)");
  }
  in.target_name =
      o.model_name_or_path.empty() ? m.target.value("model_name_or_path", std::string()) : o.model_name_or_path;

  auto train = data::open_dataset_file((fs::path(dir) / data::kTrainFile).string());
  std::optional<data::Dataset> val;
  if (fs::exists(fs::path(dir) / data::kValidationFile))
    val = data::open_dataset_file((fs::path(dir) / data::kValidationFile).string());
  for (const data::Dataset* ds : {&train, val ? &*val : nullptr}) {
    if (!ds) continue;
    EAGLE_CHECK(
        ds->stats().max_length <= o.training_seq_len,
        Error(ErrorKind::usage, "the features hold samples longer than training_seq_len")
            .file(ds->source())
            .expected(fmt::format("at most {} tokens", o.training_seq_len))
            .found(std::to_string(ds->stats().max_length))
            .hint(fmt::format("train with --training_seq_len {} (the dump's), or dump again", ds->stats().max_length)));
    data::check_token_ids(*ds, c.vocab_size, c.media_tokens);
  }
  in.store = open_dumped_features(dir, m, train, val ? &*val : nullptr, c.vocab_size);
  std::vector<std::int64_t> train_ids(train.size()), val_ids(val ? val->size() : 0);
  std::iota(train_ids.begin(), train_ids.end(), std::int64_t{0});
  std::iota(val_ids.begin(), val_ids.end(), static_cast<std::int64_t>(train.size()));
  set_data(in, std::move(train), std::move(train_ids), std::move(val), std::move(val_ids), o, eval);
  return in;
}

RunInputs open_speculators(const config::Options& o, const FeatureNeeds& head, torch::Device device, bool eval) {
  const std::string& dir = o.features_path;
  EAGLE_CHECK(!o.model_name_or_path.empty(),
              Error(ErrorKind::usage, "a speculators folder needs its target")
                  .file(dir)
                  .hint("give --model_name_or_path: its final norm and LM head turn the stored last hidden states "
                        "into the teacher, and the head uses its embedding"));
  const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
  auto rows = data::read_speculators_folder(dir, checked_against(o, config));
  RunInputs in;
  if (head.aux_hidden) {
    in.aux_layer_ids =
        head.aux_layer_ids.empty() ? target::default_aux_layer_ids(config.num_hidden_layers) : head.aux_layer_ids;
    if (head.aux_layer_ids.empty())
      log::warn("data",
                "{} does not record the layers its hidden states come from: the head records [{}] (the "
                "default, also speculators'); pass --aux_hidden_state_layer_ids with the ids the data was "
                "generated with if they differ",
                dir, fmt::join(in.aux_layer_ids, ", "));
  }
  in.store = open_speculators_features(dir, rows.samples, rows.rows, config.hidden_size,
                                       static_cast<std::int64_t>(in.aux_layer_ids.size()));
  load_target_part(o, device, o.model_name_or_path, in);
  in.target_name = o.model_name_or_path;
  set_data(in, std::move(rows.samples), std::move(rows.rows), std::nullopt, {}, o, eval);
  return in;
}

}  // namespace

namespace detail {

RunInputs load_offline_inputs(const config::Options& o, const FeatureNeeds& head, torch::Device device, bool eval) {
  const std::string& dir = o.features_path;
  if (!o.data_path.empty())
    log::warn("data", "data_path {} is not read: the features folder holds the data", o.data_path);
  if (!o.eval_data_path.empty())
    log::warn("data", "eval_data_path {} is not read: the held-out features are the folder's validation split",
              o.eval_data_path);
  RunInputs in;
  if (is_features_folder(dir))
    in = open_dumped(o, head, device, eval);
  else if (data::is_speculators_folder(dir))
    in = open_speculators(o, head, device, eval);
  else
    throw Error(ErrorKind::input, "not a features folder")
        .file(dir)
        .expected("manifest.json (eagle-train dump-features) or state.json beside hidden_states/ (speculators)");
  const auto& l = in.store->layout();
  const auto heldout = in.heldout ? in.heldout->size() : 0;
  log::info("data",
            "{} from stored features in {}: {}{} held-out samples, {} per token ({} aux values, the last "
            "hidden state {} the final norm{}); no target forward in the step",
            eval ? "evaluating" : "training", dir, eval ? "" : fmt::format("{} train and ", in.train->size()), heldout,
            model::dtype_name(l.dtype), l.aux_width, l.pre_norm ? "before" : "after",
            l.has_argmax ? ", the target's argmax" : "");
  return in;
}

// The held-out data of `eval`: the same choice as training, else data_path whole.
data::Dataset load_eval_data(const config::Options& opts, const target::TargetConfig& target) {
  if (!opts.eval_data_path.empty()) return *heldout_split(opts, target, std::nullopt);
  auto loaded = data::load_dataset(opts.data_path, checked_against(opts, target));
  if (auto heldout = heldout_split(opts, target, std::move(loaded.validation))) return std::move(*heldout);
  log::info("eval", "{} has no validation split: evaluating on all of it", opts.data_path);
  return std::move(loaded.train);
}

void add_data(RunInputs& in, const config::Options& opts, const target::TargetConfig& target, bool eval) {
  if (eval) {
    in.heldout = load_eval_data(opts, target);
    return;
  }
  auto data = load_train_data(opts, target);
  in.train = std::move(data.train);
  in.heldout = std::move(data.heldout);
}

// Features from vLLM servers: the servers checked first (their max_model_len bounds the samples), then the
// data as online, its samples numbered train first, then held-out.
RunInputs open_server(const config::Options& o, const FeatureNeeds& head, torch::Device device, bool eval) {
  const auto config = target::TargetConfig::from_model_dir(o.model_name_or_path);
  auto settings = server::ServerSettings::from(o, server::ServerPurpose::features, device::launch_from_env().rank);
  // This run's request ids (eval: a random tag): only their files in target_server_storage are read and deleted.
  settings.request_prefix = server_request_prefix(eval ? "" : o.output_dir, settings.rank);
  settings.cancel = run::stop_flag();  // a stop signal ends every wait for the servers
  const auto served = server::check_servers(settings);
  config::Options lo = o;
  // The server computes the prompt and generates one token: prompt + 1 <= max_model_len.
  if (served.max_model_len > 1 && served.max_model_len - 1 < o.training_seq_len) {
    lo.training_seq_len = served.max_model_len - 1;
    log::info("data", "the server's max_model_len {} bounds the samples to {} tokens (overlong_policy {})",
              served.max_model_len, lo.training_seq_len,
              o.overlong_policy == config::OverlongPolicy::drop ? "drop" : "truncate");
  }
  RunInputs in;
  add_data(in, lo, config, eval);
  if (head.aux_hidden)
    in.aux_layer_ids =
        head.aux_layer_ids.empty() ? target::default_aux_layer_ids(config.num_hidden_layers) : head.aux_layer_ids;
  std::vector<const data::Dataset*> splits;
  for (const auto* ds : {in.train ? &*in.train : nullptr, in.heldout ? &*in.heldout : nullptr})
    if (ds) splits.push_back(ds);
  in.store = std::make_shared<ServerFeatures>(settings, served, splits, config.hidden_size,
                                              static_cast<std::int64_t>(in.aux_layer_ids.size()));
  const auto n_train = static_cast<std::int64_t>(in.train ? in.train->size() : 0);
  in.train_samples.resize(static_cast<std::size_t>(n_train));
  std::iota(in.train_samples.begin(), in.train_samples.end(), std::int64_t{0});
  in.heldout_samples.resize(in.heldout ? in.heldout->size() : 0);
  std::iota(in.heldout_samples.begin(), in.heldout_samples.end(), n_train);
  load_target_part(o, device, o.model_name_or_path, in);
  in.target_name = o.model_name_or_path;
  log::info("data", "{} from target server features: {} aux layers [{}] and the last hidden state per token",
            eval ? "evaluating" : "training", in.aux_layer_ids.size(), fmt::join(in.aux_layer_ids, ", "));
  return in;
}

}  // namespace detail

using namespace detail;

TrainData load_train_data(const config::Options& opts, const target::TargetConfig& target) {
  auto loaded = data::load_dataset(opts.data_path, checked_against(opts, target));
  TrainData out{std::move(loaded.train), heldout_split(opts, target, std::move(loaded.validation))};
  EAGLE_CHECK(out.train.size() > 0,
              Error(ErrorKind::input, "the training data holds no usable sample").file(opts.data_path));
  check_trainable(out.train);
  log::info("data", "training samples: {} ({} tokens, {} trained); held-out samples: {}", out.train.size(),
            out.train.stats().tokens, out.train.stats().trained_tokens, out.heldout ? out.heldout->size() : 0);
  return out;
}

FeatureSources RunInputs::sources(const target::TeacherSpec& teacher, torch::Device device) const {
  auto source = [&](const std::vector<std::int64_t>& samples) {
    return store ? offline_features(store, samples, ends, teacher, device, last_as_aux)
                 : online_features(*target, teacher);
  };
  FeatureSources out;
  if (train) out.train = source(train_samples);
  if (heldout) out.heldout = source(heldout_samples);
  return out;
}

RunInputs online_inputs(target::TargetModel target, std::string target_name) {
  RunInputs in;
  in.ends = target.ends();
  in.aux_layer_ids = target.aux_layer_ids();
  in.target = std::move(target);
  in.target_name = std::move(target_name);
  return in;
}

RunInputs load_inputs(const config::Options& opts, const FeatureNeeds& needs, torch::Device device, Split split) {
  const bool eval = split == Split::eval;
  if (needs.last_as_aux) return load_last_state_inputs(opts, needs, device, eval);
  RunInputs in;
  if (!opts.features_path.empty()) {
    if (needs.last_pre_norm) {
      // A dump's aux id L is the HF convention (after the final norm); vLLM feeds such a draft the state before it.
      const auto dir = target_config_dir(opts);  // empty only for a speculators folder without its target (refused there)
      const auto last = dir.empty() ? std::int64_t{-1} : target::TargetConfig::from_model_dir(dir).num_hidden_layers;
      const auto& ids = needs.aux_layer_ids;
      EAGLE_CHECK(std::find(ids.begin(), ids.end(), last) == ids.end(),
                  Error(ErrorKind::usage, "stored features hold the target's last layer after its final norm; vLLM "
                                          "feeds a DFlash draft the state before it")
                      .place("dflash_target_layers")
                      .found(fmt::format("{} (the last layer)", last - 1))
                      .hint("train with the target in-process or from --target_server, or choose earlier layers"));
    }
    in = load_offline_inputs(opts, needs, device, eval);
    EAGLE_CHECK(!needs.aux_hidden || needs.aux_layer_ids.empty() || in.aux_layer_ids == needs.aux_layer_ids,
                Error(ErrorKind::usage, "the stored features hold other target layers than the draft reads")
                    .file(opts.features_path)
                    .place("aux_hidden_state_layer_ids")
                    .expected(fmt::format("aux ids [{}]", fmt::join(needs.aux_layer_ids, ", ")))
                    .found(fmt::format("[{}]", fmt::join(in.aux_layer_ids, ", ")))
                    .hint("dump-features --aux_hidden_state_layer_ids with the layers the draft reads"));
  } else if (!opts.target_server.empty()) {
    in = open_server(opts, needs, device, eval);  // vLLM's aux states are un-normed, aux id L included
  } else {
    // The data is checked against the target's config.json (vocabulary, media placeholders) before the weights.
    RunInputs data;
    add_data(data, opts, target::TargetConfig::from_model_dir(opts.model_name_or_path), eval);
    in = online_inputs(target::load_target(opts, device, needs.aux_layer_ids), opts.model_name_or_path);
    in.train = std::move(data.train);
    in.heldout = std::move(data.heldout);
  }
  // The AR's target (and the online step's): aux id L before the final norm, as vLLM's aux states.
  if (needs.last_pre_norm && in.target) in.target->set_last_aux_pre_norm(true);
  return in;
}

RunInputs load_train_inputs(const config::Options& opts, torch::Device device) {
  const auto& spec = head::draft_spec(config::draft_kind(opts));
  return load_inputs(opts, spec.plan(head::HeadSettings::from(opts, target_config_dir(opts))), device, Split::train);
}

std::string target_config_dir(const config::Options& opts) {
  if (!opts.model_name_or_path.empty()) return opts.model_name_or_path;
  if (is_features_folder(opts.features_path)) return (fs::path(opts.features_path) / kFeaturesTargetDir).string();
  return {};
}

}  // namespace eagle::features
