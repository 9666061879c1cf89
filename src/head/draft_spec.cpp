// What the draft table's rows share (see draft_spec.h): the kind of a config, the format names and the
// TTT heads' loss plan. The rows themselves are in registry.cpp.
#include "eagle/head/draft_spec.h"

#include "eagle/config/option_table.h"

namespace eagle::head {

HeadSettings HeadSettings::from(const config::Options& o, const std::string& target_dir) {
  HeadSettings s;
  s.eagle_version = o.eagle_version;
  s.ttt_steps = o.ttt_steps;
  s.ttt_loss_decay = o.ttt_loss_decay;
  s.loss = parse_loss_kind(o.loss);
  s.loss_name = o.loss;
  s.loss_chunk_size = o.loss_chunk_size;
  s.fc_norm = o.fc_norm;
  s.norm_output = o.norm_output;
  s.norm_before_fc = o.norm_before_fc;
  s.draft_layer = o.draft_layer;
  s.num_layers = config::resolved_draft_num_layers(o);
  s.parallel_drafting = o.parallel_drafting;
  s.mask_token_id = o.mask_token_id;
  s.recompute_activations = o.recompute_activations;
  s.dflash_target_layers = o.dflash_target_layers;
  s.dflash_block_size = o.dflash_block_size;
  s.dflash_num_anchors = o.dflash_num_anchors;
  s.dflash_decay_gamma = o.dflash_decay_gamma;
  s.dflash_hard_labels = o.dflash_hard_labels;
  s.dspark_markov_rank = o.dspark_markov_rank;
  s.dspark_confidence_head = o.dspark_confidence_head;
  s.dspark_confidence_alpha = o.dspark_confidence_alpha;
  s.dspark_sample_from_anchor = o.dspark_sample_from_anchor;
  s.dflash2_conv_kernel_size = o.dflash2_conv_kernel_size;
  s.dflash2_conv_group_size = o.dflash2_conv_group_size;
  s.dflash2_selector_rank = o.dflash2_selector_rank;
  s.dflash2_selector_top_k = o.dflash2_selector_top_k;
  s.dflash2_selector_alpha = o.dflash2_selector_alpha;
  s.aux_layer_ids = o.aux_hidden_state_layer_ids;
  s.model_dir = o.model_name_or_path;
  s.target_dir = target_dir;
  s.target_name = o.model_name_or_path;
  return s;
}

DraftKind kind_of(const HeadConfig& cfg) {
  if (cfg.mtp()) return DraftKind::mtp;
  if (cfg.dspark()) return DraftKind::dspark;
  if (cfg.dflash2()) return DraftKind::dflash2;
  if (cfg.dflash()) return DraftKind::dflash;
  return cfg.eagle_version == 1 ? DraftKind::eagle1 : DraftKind::eagle3;
}

std::string format_name(HeadFormat f) {
  switch (f) {
    case HeadFormat::sglang:
      return "sglang";
    case HeadFormat::speculators:
      return "speculators";
    case HeadFormat::vllm_eagle1:
      return "vllm-eagle1";
    case HeadFormat::mtp:
      return "mtp";
    case HeadFormat::dflash:
      return "dflash";
    case HeadFormat::dspark:
      return "dspark";
  }
  return "?";
}

std::vector<std::int64_t> count_loss_positions(const data::Batch& batch, std::int64_t steps) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(steps), 0);
  for (std::int64_t r = 0; r < batch.rows; ++r) {
    for (std::int64_t k = 0; k < steps; ++k) {
      for (std::int64_t t = 0; t + k + 2 < batch.length; ++t) {
        auto doc = batch.document_ids[batch.at(r, t)];
        auto u = batch.at(r, t + k + 2);
        if (doc >= 0 && batch.document_ids[u] == doc && batch.loss_mask[u]) ++counts[static_cast<std::size_t>(k)];
      }
    }
  }
  return counts;
}

void resolve_resumed_option(nlohmann::json& before, nlohmann::json& now, const std::string& key,
                            const nlohmann::json& saved, const nlohmann::json& unset, const nlohmann::json& resolved) {
  if (!before.contains(key) || !now.contains(key)) return;
  before[key] = saved;
  if (now[key] == unset) now[key] = resolved;
}

LossPlan ttt_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed&) {
  LossPlan plan;
  plan.denominators.assign(static_cast<std::size_t>(cfg.steps()), 0);
  for (const auto& b : batches) {
    const auto counts = count_loss_positions(b, cfg.steps());
    for (std::size_t k = 0; k < counts.size(); ++k) plan.denominators[k] += counts[k];
  }
  plan.extras.resize(batches.size());
  return plan;
}

}  // namespace eagle::head
