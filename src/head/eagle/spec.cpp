// The EAGLE-3 and EAGLE-1 rows (see eagle/spec.h).
#include "eagle/head/eagle/spec.h"

#include "eagle/head/eagle/eagle1_head.h"
#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/head/flops.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"

namespace eagle::head {
namespace {

FeatureNeeds eagle3_reads(const HeadConfig& cfg) { return {cfg.aux_layer_ids}; }
FeatureNeeds eagle1_reads(const HeadConfig&) {
  FeatureNeeds n;
  n.aux_hidden = false;
  return n;
}
// A new head reads the options' aux layers (none: the target's default, or a store's own).
FeatureNeeds eagle3_plan(const HeadSettings& s) { return {s.aux_layer_ids}; }
// EAGLE-1 reads the final hidden; the target computes the options' aux layers as before (they are unused).
FeatureNeeds eagle1_plan(const HeadSettings& s) {
  auto n = eagle1_reads(HeadConfig{});
  n.aux_layer_ids = s.aux_layer_ids;
  return n;
}

HeadConfig eagle_configure(const HeadSettings& s, const target::TargetConfig& tc, std::int64_t draft_vocab_size) {
  // EAGLE-1 fuses no aux layers: its config (and so its checkpoint, which a resume compares) names none, whatever
  // layers the target computes.
  auto cfg = HeadConfig::from_target(
      tc, s.eagle_version, s.eagle_version == 3 ? s.aux_layer_ids : std::vector<std::int64_t>{}, draft_vocab_size);
  cfg.ttt_steps = s.ttt_steps;
  cfg.ttt_loss_decay = s.ttt_loss_decay;
  cfg.loss = s.loss;
  cfg.loss_chunk_size = s.loss_chunk_size;
  if (cfg.eagle_version == 3) {
    cfg.fc_norm = s.fc_norm;
    cfg.norm_output = s.norm_output;
    cfg.norm_before_fc = s.norm_before_fc;
    cfg.qk_norm = s.draft_layer == "qwen3";
    cfg.num_layers = s.num_layers;
    cfg.parallel_drafting = s.parallel_drafting;
    if (s.draft_layer == "deepseek") cfg.use_mla_layer(tc);
    if (cfg.parallel_drafting) {
      EAGLE_CHECK(s.mask_token_id >= 0 || !tc.eos_token_ids.empty(),
                  Error(ErrorKind::usage, "P-EAGLE needs a mask token and the target names no end-of-sequence id")
                      .place("mask_token_id")
                      .hint("give --mask_token_id"));
      cfg.mask_token_id = s.mask_token_id >= 0 ? s.mask_token_id : tc.eos_token_ids.front();
    }
  }
  cfg.target_name_or_path = s.target_name;
  cfg.target_architecture = tc.architecture;
  return cfg;
}

std::shared_ptr<DraftHead> eagle_make(const HeadConfig& cfg, const HeadSettings&, const target::TargetEnds& ends,
                                      const DraftVocab& vocab, torch::Device device) {
  std::shared_ptr<DraftHead> head;
  if (cfg.eagle_version == 1)
    head = std::make_shared<Eagle1Head>(cfg);
  else
    head = std::make_shared<Eagle3Head>(cfg, vocab);
  head->module().to(device);
  head->init_from_target(ends.embed, ends.lm_head);
  return head;
}

DraftLimits eagle3_limits(const HeadConfig& cfg) {
  DraftLimits l;
  // P-EAGLE drafts every token of a round in one forward: there is no step to extend or tree to grow.
  if (cfg.parallel_drafting) l.no_tree = "tree evaluation needs a sequentially drafting head";
  l.parallel_chain = cfg.parallel_drafting;
  return l;
}
DraftLimits eagle1_limits(const HeadConfig&) {
  DraftLimits l;
  l.no_tree = "tree and sampled evaluation need an EAGLE-3 head";
  return l;
}

// aux ids and, for P-EAGLE, the mask token: the checkpoint's head records what its run resolved.
void eagle3_resolve_resume(const HeadConfig& head, nlohmann::json& before, nlohmann::json& now) {
  resolve_resumed_option(before, now, "aux_hidden_state_layer_ids", head.aux_layer_ids, nlohmann::json::array(),
                         target::default_aux_layer_ids(head.target_num_hidden_layers));
  if (head.parallel_drafting)
    resolve_resumed_option(before, now, "mask_token_id", head.mask_token_id, -1, head.mask_token_id);
}
void eagle1_resolve_resume(const HeadConfig&, nlohmann::json&, nlohmann::json&) {}

}  // namespace

const DraftSpec& eagle3_spec() {
  static const DraftSpec spec{DraftKind::eagle3,
                              "eagle3",
                              "EAGLE-3",
                              "TTT step(s)",
                              /*reduced_vocab=*/true,
                              /*memory_model=*/true,
                              /*auto_recompute=*/true,
                              /*evaluate_at_start=*/false,
                              {HeadFormat::sglang, HeadFormat::speculators},
                              HeadFormat::sglang,
                              eagle3_plan,
                              eagle3_reads,
                              eagle_configure,
                              eagle_make,
                              ttt_loss_plan,
                              eagle3_limits,
                              /*untrainable=*/nullptr,
                              eagle3_resolve_resume,
                              ttt_train_flops};
  return spec;
}

const DraftSpec& eagle1_spec() {
  static const DraftSpec spec{DraftKind::eagle1,
                              "eagle1",
                              "EAGLE-1",
                              "TTT step(s)",
                              /*reduced_vocab=*/false,
                              /*memory_model=*/true,
                              /*auto_recompute=*/true,
                              /*evaluate_at_start=*/false,
                              {HeadFormat::vllm_eagle1},
                              HeadFormat::vllm_eagle1,
                              eagle1_plan,
                              eagle1_reads,
                              eagle_configure,
                              eagle_make,
                              ttt_loss_plan,
                              eagle1_limits,
                              /*untrainable=*/nullptr,
                              eagle1_resolve_resume,
                              ttt_train_flops};
  return spec;
}

}  // namespace eagle::head
