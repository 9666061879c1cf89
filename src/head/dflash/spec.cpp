// The DFlash row (see dflash/spec.h).
#include "eagle/head/dflash/spec.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/dflash/attention.h"
#include "eagle/head/flops.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::head {
namespace {

// The target layers it reads (DFlash target layer t is aux id t + 1), aux id L before the final norm
// as vLLM's aux states (DFlash.md 1).
FeatureNeeds dflash_reads(const HeadConfig& cfg) {
  FeatureNeeds n;
  n.aux_layer_ids = cfg.aux_layer_ids;
  n.last_pre_norm = true;
  return n;
}

HeadConfig dflash_configure(const HeadSettings& s, const target::TargetConfig& tc, std::int64_t) {
  return with_run_fields(dflash_config_from_target(tc, dflash_settings(s, tc)), s, tc);  // every check, by name
}

// The head the options build for the target (its config.json read first; every DFlash option checked
// there, by name) reads these layers.
FeatureNeeds dflash_plan(const HeadSettings& s) {
  EAGLE_CHECK(!s.target_dir.empty(), Error(ErrorKind::usage, "--draft dflash is shaped after its target")
                                         .place("model_name_or_path")
                                         .hint("give --model_name_or_path (a folder with config.json)"));
  const auto target = target::TargetConfig::from_model_dir(s.target_dir);
  const auto cfg = dflash_config_from_target(target, dflash_settings(s, target));
  // The DFlash config (checkpoints and exports alike) is written with rope_theta alone: refused now,
  // not at the first checkpoint.
  EAGLE_CHECK(cfg.rope.type == "default",
              Error(ErrorKind::usage, "DFlash drafts are written with default RoPE only, and the target scales its RoPE")
                  .place("draft")
                  .found(fmt::format("--draft dflash on a target with rope_type {}", cfg.rope.type))
                  .hint("train an EAGLE head for this target (scaled RoPE in the DFlash config is not written yet)"));
  log::info("model", "DFlash draft: target layers [{}] (aux ids [{}]), block {}, mask token {}",
            fmt::join(dflash_target_layer_ids(cfg), ", "), fmt::join(cfg.aux_layer_ids, ", "),
            cfg.dflash_block_size, cfg.mask_token_id);
  return dflash_reads(cfg);
}

// Trained: fc, hidden_norm, the layers, the final norm. Frozen: the embedding (its mask row too) and the
// LM head, the target's (vLLM shares them; DFlash.md 1.4).
std::shared_ptr<DraftHead> dflash_make(const HeadConfig& cfg, const HeadSettings& s, const target::TargetEnds& ends,
                                       const DraftVocab&, torch::Device device) {
  auto head = std::make_shared<DFlashHead>(cfg);
  head->module().to(device);
  head->init_from_target(ends.embed, ends.lm_head);
  log::info("model",
            "DFlash draft: {} layer(s), block {} ({} tokens per forward), target layers [{}], mask token {}, {} "
            "anchors per row, gamma {}, {} ({} parameters trained; embedding and LM head the target's, frozen)",
            cfg.num_layers, cfg.dflash_block_size, cfg.dflash_block_size - 1,
            fmt::join(dflash_target_layer_ids(cfg), ", "), cfg.mask_token_id, cfg.dflash_num_anchors,
            cfg.dflash_decay_gamma, cfg.dflash_hard_labels ? "hard labels" : s.loss_name, count_parameters(*head));
  return head;
}

// The anchors of each batch, drawn on the host from (seed, step, batch, rank): a resumed run draws what
// the interrupted one would have, and an evaluation (step -1) the same every time; their valid slots are
// the denominators.
LossPlan dflash_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed) {
  return anchored_loss_plan(batches, cfg, seed, cfg.dflash_block_size);
}

DraftLimits dflash_limits(const HeadConfig& cfg) {
  DraftLimits l;
  l.max_draft_len = cfg.dflash_block_size - 1;
  l.max_draft_len_what = "its block's mask slots";
  l.max_draft_len_name = "dflash_block_size - 1";
  l.no_tree = "a DFlash draft proposes one block a round: there is no tree";
  l.parallel_chain = true;
  return l;
}

// dflash_anchor_candidates' rule on the data: a trained anchor a with its whole block in its sample
// (a + block_size - 1 < length) and a trained slot after it; else every step would train nothing.
std::string dflash_untrainable(const data::Dataset& train, const HeadConfig& cfg, std::int64_t max_len) {
  const auto B = cfg.dflash_block_size;
  if (has_anchored_span(train, B, max_len)) return "";
  return fmt::format(
      "a sample holding a whole block of {} tokens (dflash_block_size) within training_seq_len {} whose anchor "
      "and a later token of the block are trained (loss_mask 1)",
      B, max_len);
}

}  // namespace

// mask_token_id and dflash_target_layers: the checkpoint's head records what its run resolved
// (draft_num_layers is resolved in both before this).
void dflash_resolve_resume(const HeadConfig& head, nlohmann::json& before, nlohmann::json& now) {
  const std::string layers = "draft_num_layers", dflash_layers = "dflash_target_layers";
  resolve_resumed_option(before, now, "mask_token_id", head.mask_token_id, -1, head.mask_token_id);
  if (before.contains(dflash_layers) && now.contains(dflash_layers)) {
    before[dflash_layers] = dflash_target_layer_ids(head);
    if (now[dflash_layers].empty() && now.contains(layers) && now[layers].is_number_integer()) {
      now[dflash_layers] =
          dflash_default_target_layer_ids(head.target_num_hidden_layers, now[layers].get<std::int64_t>());
    } else if (now[dflash_layers].is_array()) {  // as the head reads them
      now[dflash_layers] = dflash_sorted_layer_ids(now[dflash_layers].get<std::vector<std::int64_t>>());
    }
  }
}

DFlashSettings dflash_settings(const HeadSettings& s, const target::TargetConfig& target) {
  DFlashSettings d;
  d.block_size = s.dflash_block_size;
  d.num_layers = s.num_layers;
  d.target_layer_ids = s.dflash_target_layers;
  EAGLE_CHECK(s.mask_token_id >= 0 || !target.eos_token_ids.empty(),
              Error(ErrorKind::usage, "DFlash needs a mask token and the target names no end-of-sequence id")
                  .place("mask_token_id")
                  .hint("give --mask_token_id (a token of the target's vocabulary; its embedding row is the mask "
                        "slots' input)"));
  d.mask_token_id = s.mask_token_id >= 0 ? s.mask_token_id : target.eos_token_ids.front();
  d.num_anchors = s.dflash_num_anchors;
  d.decay_gamma = s.dflash_decay_gamma;
  d.hard_labels = s.dflash_hard_labels;
  return d;
}

LossPlan anchored_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed,
                            std::int64_t span) {
  LossPlan plan;
  plan.denominators.assign(static_cast<std::size_t>(span - 1), 0);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    auto a = dflash_batch_anchors(
        batches[i], cfg, dflash_anchor_generator(seed.seed, seed.step, static_cast<std::int64_t>(i), seed.rank), span);
    for (std::size_t k = 0; k < a.slots.size(); ++k) plan.denominators[k] += a.slots[k];
    plan.extras.push_back(std::move(a.anchors));
  }
  return plan;
}

bool has_anchored_span(const data::Dataset& train, std::int64_t span, std::int64_t max_len) {
  for (std::size_t i = 0; i < train.size(); ++i) {
    const auto n = std::min(train.length(i), max_len);
    for (std::int64_t a = 0; a + span - 1 < n; ++a) {
      if (!train.trained(i, a)) continue;
      for (std::int64_t k = 1; k < span; ++k)
        if (train.trained(i, a + k)) return true;
    }
  }
  return false;
}

DFlashAnchors dflash_batch_anchors(const data::Batch& b, const HeadConfig& cfg, at::Generator generator,
                                   std::int64_t span) {
  if (span == 0) span = cfg.dflash_block_size;
  const auto mask = torch::from_blob(const_cast<std::uint8_t*>(b.loss_mask.data()), {b.rows, b.length},
                                     torch::TensorOptions().dtype(torch::kUInt8))
                        .to(torch::kBool);
  const auto docs = torch::from_blob(const_cast<std::int32_t*>(b.document_ids.data()), {b.rows, b.length},
                                     torch::TensorOptions().dtype(torch::kInt32))
                        .to(torch::kInt64);
  auto anchors = dflash_sample_anchors(mask, docs, span, cfg.dflash_num_anchors, generator);
  auto slots = dflash_count_slots(mask, docs, anchors, span);
  return {std::move(anchors), std::move(slots)};
}

HeadConfig with_run_fields(HeadConfig cfg, const HeadSettings& s, const target::TargetConfig& tc) {
  cfg.loss = s.loss;
  cfg.loss_chunk_size = s.loss_chunk_size;
  cfg.target_name_or_path = s.target_name;
  cfg.target_architecture = tc.architecture;
  return cfg;
}

const DraftSpec& dflash_spec() {
  static const DraftSpec spec{
      DraftKind::dflash,
      "dflash",
      "a DFlash",
      "mask slot(s) per block",
      /*reduced_vocab=*/false,
      /*memory_model=*/false,  // the estimate models EAGLE's TTT unroll, not DFlash's blocks (not yet)
      /*auto_recompute=*/false,
      /*evaluate_at_start=*/false,
      {HeadFormat::dflash, HeadFormat::sglang},
      HeadFormat::dflash,
      dflash_plan,
      dflash_reads,
      dflash_configure,
      dflash_make,
      dflash_loss_plan,
      dflash_limits,
      dflash_untrainable,
      dflash_resolve_resume,
      block_train_flops};
  return spec;
}

}  // namespace eagle::head
