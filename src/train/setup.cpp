// The draft head of a run (see setup.h).
#include "eagle/train/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/config/option_table.h"
#include "eagle/features/inputs.h"
#include "eagle/head/dflash_head.h"
#include "eagle/head/draft_vocab.h"
#include "eagle/head/head_io.h"
#include "eagle/head/mtp_head.h"
#include "eagle/head/mtp_io.h"
#include "eagle/train/memory_estimate.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::train {

namespace {

// --draft mtp: the target's shipped MTP layer, read from the target folder under its native names.
// Trained: every tensor of the layer (its input norms and projection, the decoder block, the output
// norm: MiMo's model.mtp_layers.0.*, Qwen3.5's mtp.*).
// Frozen: the embedding and the LM head, the target's (vLLM swaps in the target's; MTP.md 0).
std::shared_ptr<head::DraftHead> make_mtp_head(const config::Options& opts, const features::RunInputs& inputs,
                                               torch::Device device) {
  auto cfg = head::mtp_config_from_target(inputs.ends.config);
  cfg.ttt_steps = opts.ttt_steps;
  cfg.ttt_loss_decay = opts.ttt_loss_decay;
  cfg.loss = head::parse_loss_kind(opts.loss);
  cfg.loss_chunk_size = opts.loss_chunk_size;
  cfg.recompute = opts.recompute_activations == "off" ? head::RecomputeMode::off : head::RecomputeMode::mlp;
  cfg.target_name_or_path = inputs.target_name;
  cfg.target_architecture = inputs.ends.config.architecture;
  auto head = std::make_shared<head::MtpHead>(cfg);
  head::load_mtp_weights(*head, opts.model_name_or_path);
  head->module().to(device);
  head->set_target_weights(inputs.ends.embed, inputs.ends.lm_head);
  const auto layout = head::mtp_layout(cfg);
  auto prefix = layout.prefix;
  prefix.pop_back();  // model.mtp_layers.0, mtp, model.layers.{L}
  // DeepSeek-V3, GLM-4.5: the logits are the target's lm_head of shared_head.norm (vLLM swaps the target's LM
  // head in for shared_head.head); a shared_head.head the folder holds is left as it is.
  const bool shared_head = layout.output_norm.rfind("shared_head.", 0) == 0;
  log::info("model", "MTP head: {}'s {} ({} parameters trained; embedding and LM head frozen{}), {} TTT step(s)",
            opts.model_name_or_path, prefix, head::count_parameters(*head),
            shared_head ? ", the target's lm_head as shared_head.head" : "", cfg.ttt_steps);
  return head;
}

// --draft dflash: a new DFlash draft shaped after the target (DFlash.md section 1), reading the
// layers the inputs were loaded for. Trained: fc, hidden_norm, the layers, the final norm. Frozen:
// the embedding (its mask row too) and the LM head, the target's (vLLM shares them; DFlash.md 1.4).
std::shared_ptr<head::DraftHead> make_dflash_head(const config::Options& opts, const features::RunInputs& inputs,
                                                  torch::Device device) {
  const auto& tc = inputs.ends.config;
  auto cfg = head::dflash_config_from_target(tc, features::dflash_settings(opts, tc));
  cfg.loss = head::parse_loss_kind(opts.loss);
  cfg.loss_chunk_size = opts.loss_chunk_size;
  cfg.target_name_or_path = inputs.target_name;
  cfg.target_architecture = tc.architecture;
  EAGLE_CHECK(cfg.aux_layer_ids == inputs.aux_layer_ids,
              Error(ErrorKind::internal, "the DFlash draft reads other target layers than its inputs hold")
                  .expected(fmt::format("{}", fmt::join(cfg.aux_layer_ids, ", ")))
                  .found(fmt::format("{}", fmt::join(inputs.aux_layer_ids, ", "))));
  auto head = std::make_shared<head::DFlashHead>(cfg);
  head->module().to(device);
  head->init_from_target(inputs.ends.embed, inputs.ends.lm_head);
  log::info("model",
            "DFlash draft: {} layer(s), block {} ({} tokens per forward), target layers [{}], mask token {}, {} "
            "anchors per row, gamma {}, {} ({} parameters trained; embedding and LM head the target's, frozen)",
            cfg.num_layers, cfg.dflash_block_size, cfg.dflash_block_size - 1,
            fmt::join(head::dflash_target_layer_ids(cfg), ", "), cfg.mask_token_id, cfg.dflash_num_anchors,
            cfg.dflash_decay_gamma, cfg.dflash_hard_labels ? "hard labels" : opts.loss, head::count_parameters(*head));
  return head;
}

}  // namespace

std::shared_ptr<head::DraftHead> make_head(const config::Options& opts, const features::RunInputs& inputs,
                                           torch::Device device) {
  const auto& tc = inputs.ends.config;
  if (opts.draft == "mtp") return make_mtp_head(opts, inputs, device);
  if (opts.draft == "dflash") return make_dflash_head(opts, inputs, device);
  const auto& stats = inputs.train.value().stats();
  const auto counts = stats.trained_token_counts.entries();
  const auto vocab = head::build_draft_vocab(counts, tc.vocab_size, std::min(opts.draft_vocab_size, tc.vocab_size));
  auto cfg = head::HeadConfig::from_target(tc, opts.eagle_version, inputs.aux_layer_ids, vocab.size());
  cfg.ttt_steps = opts.ttt_steps;
  cfg.ttt_loss_decay = opts.ttt_loss_decay;
  cfg.loss = head::parse_loss_kind(opts.loss);
  cfg.loss_chunk_size = opts.loss_chunk_size;
  if (cfg.eagle_version == 3) {
    cfg.fc_norm = opts.fc_norm;
    cfg.norm_output = opts.norm_output;
    cfg.norm_before_fc = opts.norm_before_fc;
    cfg.qk_norm = opts.draft_layer == "qwen3";
    cfg.num_layers = config::resolved_draft_num_layers(opts.draft, opts.draft_num_layers);
    cfg.parallel_drafting = opts.parallel_drafting;
    if (opts.draft_layer == "deepseek") cfg.use_mla_layer(tc);
    if (cfg.parallel_drafting) {
      EAGLE_CHECK(opts.mask_token_id >= 0 || !tc.eos_token_ids.empty(),
                  Error(ErrorKind::usage, "P-EAGLE needs a mask token and the target names no end-of-sequence id")
                      .place("mask_token_id")
                      .hint("give --mask_token_id"));
      cfg.mask_token_id = opts.mask_token_id >= 0 ? opts.mask_token_id : tc.eos_token_ids.front();
    }
  }
  // After the head's shape is known: auto weighs each mode's predicted step against the memory left.
  cfg.recompute = resolve_recompute(opts, tc, cfg, device, inputs.target.has_value());
  cfg.target_name_or_path = inputs.target_name;
  cfg.target_architecture = tc.architecture;
  auto head = head::make_head(cfg, vocab);
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
