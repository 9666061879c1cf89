// The draft head of a run (see setup.h): its row of the draft table configures and makes it.
#include "eagle/train/setup.h"

#include <optional>

#include <fmt/format.h>

#include "eagle/config/option_table.h"
#include "eagle/features/inputs.h"
#include "eagle/head/draft_spec.h"
#include "eagle/head/draft_vocab.h"
#include "eagle/train/init_draft.h"
#include "eagle/train/memory_estimate.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::train {

head::HeadSettings head_settings(const config::Options& opts, const features::RunInputs& inputs) {
  auto s = head::HeadSettings::from(opts, features::target_config_dir(opts));
  s.aux_layer_ids = inputs.aux_layer_ids;  // what the inputs were loaded with (the default resolved)
  s.target_name = inputs.target_name;
  return s;
}

std::shared_ptr<head::DraftHead> make_head(const config::Options& opts, const features::RunInputs& inputs,
                                           torch::Device device) {
  const auto& tc = inputs.ends.config;
  const auto& spec = head::draft_spec(config::draft_kind(opts));
  const auto settings = head_settings(opts, inputs);
  // The head the options configure for this target (its draft vocabulary: draft_vocab_size ids, capped at V).
  auto configure = [&](const config::Options& o) {
    const auto& row = head::draft_spec(config::draft_kind(o));
    return row.configure(head_settings(o, inputs), tc,
                         row.reduced_vocab ? std::min(o.draft_vocab_size, tc.vocab_size) : tc.vocab_size);
  };
  const auto& stats = inputs.train.value().stats();
  head::DraftVocab vocab;
  head::HeadConfig cfg;
  std::optional<InitDraft> init;
  if (!opts.init_draft.empty()) {
    // --init_draft: the draft's shape, weights and vocabulary, the run's training fields (init_draft.h).
    init.emplace(load_init_draft(opts, inputs, configure, device));
    vocab = init->vocab;
    cfg = init->config;
  } else {
    // A reduced draft vocabulary: the most frequent trained tokens (EAGLE.md); else the target's whole.
    vocab = spec.reduced_vocab ? head::build_draft_vocab(stats.trained_token_counts.entries(), tc.vocab_size,
                                                         std::min(opts.draft_vocab_size, tc.vocab_size))
                               : head::DraftVocab::identity(tc.vocab_size);
    cfg = configure(opts);
  }
  if (spec.untrainable) {
    const auto& train = inputs.train.value();
    const auto expected = spec.untrainable(train, cfg, opts.training_seq_len);
    EAGLE_CHECK(
        expected.empty(),
        Error(ErrorKind::input, fmt::format("the training data has nothing {} draft can train on", spec.noun))
            .file(train.source())
            .expected(expected)
            .found(fmt::format("{} samples, {} trained tokens, none such", train.size(), train.stats().trained_tokens))
            .hint("check the loss masks and the sample lengths (eagle-train data-stats)"));
  }
  // After the head's shape is known: auto weighs each mode's predicted step against the memory left.
  if (spec.auto_recompute)
    cfg.recompute = resolve_recompute(opts, tc, cfg, device, inputs.target.has_value());
  auto head = spec.make(cfg, settings, inputs.ends, vocab, device);
  if (init) start_from_init_draft(*head, *init, opts.init_draft);
  // What the head starts from is finite (an MTP layer is read from the target's folder, beside the layers the
  // target load checked).
  head::check_finite_parameters(*head, init ? opts.init_draft : opts.model_name_or_path,
                                "the checkpoint is corrupt; download or convert it again");
  if (spec.reduced_vocab) {
    std::uint64_t covered = 0;
    for (auto id : vocab.draft_ids) covered += stats.trained_token_counts.count(static_cast<data::TokenId>(id));
    log::info(
        "model", "draft vocabulary{}: {} of {} target ids ({:.1f}% of trained tokens covered)",
        init ? " (the draft's)" : "", vocab.size(), tc.vocab_size,
        stats.trained_tokens ? 100.0 * static_cast<double>(covered) / static_cast<double>(stats.trained_tokens) : 0.0);
  }
  return head;
}

}  // namespace eagle::train
