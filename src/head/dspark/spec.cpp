// The DSpark row (see dspark/spec.h): DFlash's target layers, anchors and block, in the anchor-as-first layout.
#include "eagle/head/dspark/spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/dflash/spec.h"
#include "eagle/head/flops.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::head {
namespace {

const char* layout_name(const HeadConfig& cfg) {
  return cfg.dspark_sample_from_anchor ? "anchor first" : "1 + N fill-in";
}

// The span of positions a block's anchor and its drafting slots' labels cover: the anchor-as-first block's S
// slots predict x[p + 1 .. p + S], the fill-in block's slots 1 .. S - 1 predict x[p + 1 .. p + S - 1].
std::int64_t label_span(const HeadConfig& cfg) {
  return cfg.dflash_block_size + (cfg.dspark_sample_from_anchor ? 1 : 0);
}

FeatureNeeds dspark_reads(const HeadConfig& cfg) {
  FeatureNeeds n;
  n.aux_layer_ids = cfg.aux_layer_ids;
  n.last_pre_norm = true;
  return n;
}

HeadConfig dspark_config(const HeadSettings& s, const target::TargetConfig& tc) {
  EAGLE_CHECK(!s.dflash_hard_labels, Error(ErrorKind::usage, "DSpark trains on the target's distribution")
                                         .place("dflash_hard_labels")
                                         .hint("drop --dflash_hard_labels for --draft dspark"));
  EAGLE_CHECK(s.dflash_decay_gamma > 0, Error(ErrorKind::usage, "DSpark weighs slot k by exp(-k / gamma)")
                                            .place("dflash_decay_gamma")
                                            .expected("a gamma above 0 (speculators' recipe: 4)")
                                            .found(fmt::format("{}", s.dflash_decay_gamma)));
  auto cfg = dflash_config_from_target(tc, dflash_settings(s, tc));  // every DFlash check, by name
  EAGLE_CHECK(s.dspark_markov_rank >= 1 && s.dspark_markov_rank <= 65536,
              Error(ErrorKind::usage, "the Markov head's rank is out of range")
                  .place("dspark_markov_rank")
                  .expected("1 .. 65536 (speculators' recipe: 256)")
                  .found(std::to_string(s.dspark_markov_rank)));
  cfg.dspark_markov_rank = s.dspark_markov_rank;
  cfg.dspark_confidence_head = s.dspark_confidence_head;
  cfg.dspark_confidence_alpha = s.dspark_confidence_alpha;
  cfg.dspark_sample_from_anchor = s.dspark_sample_from_anchor;
  cfg.ttt_steps = cfg.steps();
  return cfg;
}

HeadConfig dspark_configure(const HeadSettings& s, const target::TargetConfig& tc, std::int64_t) {
  return with_run_fields(dspark_config(s, tc), s, tc);
}

FeatureNeeds dspark_plan(const HeadSettings& s) {
  EAGLE_CHECK(!s.target_dir.empty(), Error(ErrorKind::usage, "--draft dspark is shaped after its target")
                                         .place("model_name_or_path")
                                         .hint("give --model_name_or_path (a folder with config.json)"));
  const auto target = target::TargetConfig::from_model_dir(s.target_dir);
  const auto cfg = dspark_config(s, target);
  EAGLE_CHECK(cfg.rope.type == "default",
              Error(ErrorKind::usage, "DSpark drafts are written with default RoPE only, and the target scales its RoPE")
                  .place("draft")
                  .found(fmt::format("--draft dspark on a target with rope_type {}", cfg.rope.type))
                  .hint("train an EAGLE head for this target (scaled RoPE in the DSpark config is not written yet)"));
  log::info("model", "DSpark draft: target layers [{}] (aux ids [{}]), block {} ({}), mask token {}, Markov rank {}",
            fmt::join(dflash_target_layer_ids(cfg), ", "), fmt::join(cfg.aux_layer_ids, ", "), cfg.dflash_block_size,
            layout_name(cfg), cfg.mask_token_id, cfg.dspark_markov_rank);
  return dspark_reads(cfg);
}

std::shared_ptr<DraftHead> dspark_make(const HeadConfig& cfg, const HeadSettings&, const target::TargetEnds& ends,
                                       const DraftVocab&, torch::Device device) {
  auto head = std::make_shared<DSparkHead>(cfg);
  head->module().to(device);
  head->init_from_target(ends.embed, ends.lm_head);
  log::info("model",
            "DSpark draft: {} layer(s), block {} ({} tokens per round, {}), target layers [{}], mask token "
            "{}, Markov rank {}, confidence head {}, {} anchors per row, gamma {} ({} parameters trained; embedding "
            "and LM head the target's, frozen)",
            cfg.num_layers, cfg.dflash_block_size, cfg.steps(), layout_name(cfg),
            fmt::join(dflash_target_layer_ids(cfg), ", "), cfg.mask_token_id, cfg.dspark_markov_rank,
            cfg.dspark_confidence_head ? fmt::format("on (alpha {})", cfg.dspark_confidence_alpha) : "off",
            cfg.dflash_num_anchors, cfg.dflash_decay_gamma, count_parameters(*head));
  return head;
}

// DFlash's anchors over the label span: every drafting slot's label must lie in p's sample; its valid slots
// (labels trained) are the denominators.
LossPlan dspark_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed) {
  return anchored_loss_plan(batches, cfg, seed, label_span(cfg));
}

DraftLimits dspark_limits(const HeadConfig& cfg) {
  DraftLimits l;
  l.max_draft_len = cfg.steps();
  l.max_draft_len_what = cfg.dspark_sample_from_anchor ? "its block's slots" : "its block's slots after the anchor";
  l.max_draft_len_name = cfg.dspark_sample_from_anchor ? "dflash_block_size" : "dflash_block_size - 1";
  l.no_tree = "a DSpark draft proposes one block a round: there is no tree";
  l.parallel_chain = true;  // one forward; each token then biased by the one before it (DraftHead::parallel_chain)
  return l;
}

// A trained anchor a with a trained label after it inside its sample (a + S < length), as the loss plan draws.
std::string dspark_untrainable(const data::Dataset& train, const HeadConfig& cfg, std::int64_t max_len) {
  const auto span = label_span(cfg);
  if (has_anchored_span(train, span, max_len)) return "";
  return fmt::format(
      "a sample of more than {} tokens ({}) within training_seq_len {} whose anchor and a later token of the block "
      "are trained (loss_mask 1)",
      span - 1,
      cfg.dspark_sample_from_anchor ? "dflash_block_size, and the token after the block" : "dflash_block_size - 1",
      max_len);
}

}  // namespace

const DraftSpec& dspark_spec() {
  static const DraftSpec spec{DraftKind::dspark,
                              "dspark",
                              "a DSpark",
                              "slot(s) per block",
                              /*reduced_vocab=*/false,
                              /*memory_model=*/false,
                              /*auto_recompute=*/false,
                              /*evaluate_at_start=*/false,
                              {HeadFormat::dspark, HeadFormat::speculators},
                              HeadFormat::dspark,
                              dspark_plan,
                              dspark_reads,
                              dspark_configure,
                              dspark_make,
                              dspark_loss_plan,
                              dspark_limits,
                              dspark_untrainable,
                              dflash_resolve_resume,
                              block_train_flops};
  return spec;
}

}  // namespace eagle::head
