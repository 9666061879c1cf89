// The DFlash2 row (see dflash2/spec.h): DFlash's target layers, anchors and 1 + N block, with the convolutions
// and the candidate selector.
#include "eagle/head/dflash2/spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/dflash/spec.h"
#include "eagle/head/dflash2/head.h"
#include "eagle/head/flops.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::head {
namespace {

FeatureNeeds dflash2_reads(const HeadConfig& cfg) {
  FeatureNeeds n;
  n.aux_layer_ids = cfg.aux_layer_ids;
  n.last_pre_norm = true;
  return n;
}

HeadConfig dflash2_config(const HeadSettings& s, const target::TargetConfig& tc) {
  EAGLE_CHECK(!s.dflash_hard_labels, Error(ErrorKind::usage, "DFlash2 trains on the target's distribution")
                                         .place("dflash_hard_labels")
                                         .hint("drop --dflash_hard_labels for --draft dflash2"));
  EAGLE_CHECK(s.dflash_decay_gamma > 0, Error(ErrorKind::usage, "DFlash2 weighs slot k by exp(-(k - 1) / gamma)")
                                            .place("dflash_decay_gamma")
                                            .expected("a gamma above 0 (speculators' recipe: 4)")
                                            .found(fmt::format("{}", s.dflash_decay_gamma)));
  auto cfg = dflash_config_from_target(tc, dflash_settings(s, tc));  // every DFlash check, by name
  EAGLE_CHECK(s.dflash2_conv_group_size >= 1 && cfg.hidden_size % s.dflash2_conv_group_size == 0,
              Error(ErrorKind::usage, "the convolution's groups must tile the hidden size")
                  .place("dflash2_conv_group_size")
                  .expected(fmt::format("a divisor of the target's hidden_size {}", cfg.hidden_size))
                  .found(std::to_string(s.dflash2_conv_group_size)));
  EAGLE_CHECK(s.dflash2_conv_kernel_size >= 1 && s.dflash2_conv_kernel_size <= cfg.dflash_block_size,
              Error(ErrorKind::usage, "the convolution reaches further back than a block")
                  .place("dflash2_conv_kernel_size")
                  .expected(fmt::format("1 .. {} (dflash_block_size)", cfg.dflash_block_size))
                  .found(std::to_string(s.dflash2_conv_kernel_size)));
  EAGLE_CHECK(s.dflash2_selector_top_k >= 1 && s.dflash2_selector_top_k <= cfg.vocab_size,
              Error(ErrorKind::usage, "the selector reranks more tokens than the vocabulary holds")
                  .place("dflash2_selector_top_k")
                  .expected(fmt::format("1 .. {} (the target's vocabulary)", cfg.vocab_size))
                  .found(std::to_string(s.dflash2_selector_top_k)));
  EAGLE_CHECK(s.dflash2_selector_rank >= 1, Error(ErrorKind::usage, "the selector's rank is out of range")
                                                .place("dflash2_selector_rank")
                                                .expected(">= 1 (speculators' recipe: 256)")
                                                .found(std::to_string(s.dflash2_selector_rank)));
  cfg.dflash2_conv_kernel_size = s.dflash2_conv_kernel_size;
  cfg.dflash2_conv_group_size = s.dflash2_conv_group_size;
  cfg.dflash2_selector_rank = s.dflash2_selector_rank;
  cfg.dflash2_selector_top_k = s.dflash2_selector_top_k;
  cfg.dflash2_selector_alpha = s.dflash2_selector_alpha;
  return cfg;
}

HeadConfig dflash2_configure(const HeadSettings& s, const target::TargetConfig& tc, std::int64_t) {
  return with_run_fields(dflash2_config(s, tc), s, tc);
}

FeatureNeeds dflash2_plan(const HeadSettings& s) {
  EAGLE_CHECK(!s.target_dir.empty(), Error(ErrorKind::usage, "--draft dflash2 is shaped after its target")
                                         .place("model_name_or_path")
                                         .hint("give --model_name_or_path (a folder with config.json)"));
  const auto target = target::TargetConfig::from_model_dir(s.target_dir);
  const auto cfg = dflash2_config(s, target);
  EAGLE_CHECK(cfg.rope.type == "default",
              Error(ErrorKind::usage, "DFlash2 drafts are written with default RoPE only, and the target scales its RoPE")
                  .place("draft")
                  .found(fmt::format("--draft dflash2 on a target with rope_type {}", cfg.rope.type))
                  .hint("train an EAGLE head for this target (scaled RoPE in the DFlash2 config is not written yet)"));
  log::info("model", "DFlash2 draft: target layers [{}] (aux ids [{}]), block {}, mask token {}",
            fmt::join(dflash_target_layer_ids(cfg), ", "), fmt::join(cfg.aux_layer_ids, ", "),
            cfg.dflash_block_size, cfg.mask_token_id);
  return dflash2_reads(cfg);
}

std::shared_ptr<DraftHead> dflash2_make(const HeadConfig& cfg, const HeadSettings&, const target::TargetEnds& ends,
                                        const DraftVocab&, torch::Device device) {
  auto head = std::make_shared<DFlash2Head>(cfg);
  head->module().to(device);
  head->init_from_target(ends.embed, ends.lm_head);
  log::info("model",
            "DFlash2 draft: {} layer(s), block {} ({} tokens per round), target layers [{}], mask token {}, "
            "convolutions of {} taps over groups of {} channels, selector rank {} over the top {} (alpha {}), {} "
            "anchors per row, gamma {} ({} parameters trained; embedding and LM head the target's, frozen)",
            cfg.num_layers, cfg.dflash_block_size, cfg.dflash_block_size - 1,
            fmt::join(dflash_target_layer_ids(cfg), ", "), cfg.mask_token_id, cfg.dflash2_conv_kernel_size,
            cfg.dflash2_conv_group_size, cfg.dflash2_selector_rank, cfg.dflash2_selector_top_k,
            cfg.dflash2_selector_alpha, cfg.dflash_num_anchors, cfg.dflash_decay_gamma, count_parameters(*head));
  return head;
}

// DFlash's anchors and valid slots: the block's slots 1 .. S - 1 predict x[p + 1 .. p + S - 1].
LossPlan dflash2_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed) {
  return anchored_loss_plan(batches, cfg, seed, cfg.dflash_block_size);
}

DraftLimits dflash2_limits(const HeadConfig& cfg) {
  DraftLimits l;
  l.max_draft_len = cfg.dflash_block_size - 1;
  l.max_draft_len_what = "its block's mask slots";
  l.max_draft_len_name = "dflash_block_size - 1";
  l.no_tree = "a DFlash2 draft proposes one block a round: there is no tree";
  l.parallel_chain = true;  // one forward; each slot's pick scored against the one before (parallel_chain)
  return l;
}

}  // namespace

const DraftSpec& dflash2_spec() {
  static const DraftSpec spec{DraftKind::dflash2,
                              "dflash2",
                              "a DFlash2",
                              "mask slot(s) per block",
                              /*reduced_vocab=*/false,
                              /*memory_model=*/false,
                              /*auto_recompute=*/false,
                              /*evaluate_at_start=*/false,
                              {HeadFormat::dflash, HeadFormat::speculators},
                              HeadFormat::dflash,
                              dflash2_plan,
                              dflash2_reads,
                              dflash2_configure,
                              dflash2_make,
                              dflash2_loss_plan,
                              dflash2_limits,
                              dflash_spec().untrainable,  // DFlash's block: the same anchors and slots
                              dflash_resolve_resume,
                              block_train_flops};
  return spec;
}

}  // namespace eagle::head
