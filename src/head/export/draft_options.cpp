// The options that build a given draft's head (see draft_options.h).
#include "eagle/head/export/draft_options.h"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/config/draft_kind.h"
#include "eagle/config/option_table.h"
#include "eagle/head/dflash/head.h"
#include "eagle/head/draft_spec.h"

namespace eagle::head {

namespace {

std::string ids_text(const std::vector<std::int64_t>& ids) { return fmt::format("[{}]", fmt::join(ids, ", ")); }

}  // namespace

std::optional<OptionConflict> options_for_draft(const HeadConfig& draft, config::Options& o) {
  const auto kind = kind_of(draft);
  if (config::draft_kind(o) != kind) {
    if (config::draft_kind(o) != config::draft_kind(config::Options{}))
      return OptionConflict{"draft", config::draft_kind_flags(kind), config::draft_kind_flags(config::draft_kind(o))};
    config::set_draft_kind(o, kind);
  }
  // draft_num_layers 0 is the kind's default count, which the draft need not have (an MTP head's is always 1).
  if (o.draft_num_layers == 0 && draft.num_layers != config::resolved_draft_num_layers(o))
    o.draft_num_layers = draft.num_layers;
  if (config::resolved_draft_num_layers(o) != draft.num_layers)
    return OptionConflict{"draft_num_layers", std::to_string(draft.num_layers), std::to_string(o.draft_num_layers)};
  if (kind == DraftKind::eagle3 && !draft.aux_layer_ids.empty()) {
    if (o.aux_hidden_state_layer_ids.empty()) o.aux_hidden_state_layer_ids = draft.aux_layer_ids;
    if (o.aux_hidden_state_layer_ids != draft.aux_layer_ids)
      return OptionConflict{"aux_hidden_state_layer_ids", ids_text(draft.aux_layer_ids),
                            ids_text(o.aux_hidden_state_layer_ids)};
  }
  if (draft.dflash()) {
    const auto ids = dflash_target_layer_ids(draft);
    if (o.dflash_target_layers.empty()) o.dflash_target_layers = ids;
    if (dflash_sorted_layer_ids(o.dflash_target_layers) != ids)
      return OptionConflict{"dflash_target_layers", ids_text(ids), ids_text(o.dflash_target_layers)};
  }
  return std::nullopt;
}

head::HeadConfig with_run_training(head::HeadConfig c, const head::HeadConfig& run) {
  if (!c.dflash()) c.ttt_steps = run.ttt_steps;
  c.ttt_loss_decay = run.ttt_loss_decay;
  c.loss = run.loss;
  c.loss_chunk_size = run.loss_chunk_size;
  c.recompute = run.recompute;
  c.attention = run.attention;
  c.eagle1_feature_weight = run.eagle1_feature_weight;
  c.eagle1_token_weight = run.eagle1_token_weight;
  c.dflash_num_anchors = run.dflash_num_anchors;
  c.dflash_decay_gamma = run.dflash_decay_gamma;
  c.dflash_hard_labels = run.dflash_hard_labels;
  c.dspark_confidence_alpha = run.dspark_confidence_alpha;
  c.dflash2_selector_alpha = run.dflash2_selector_alpha;
  c.target_name_or_path = run.target_name_or_path;
  c.target_architecture = run.target_architecture;
  c.target_dtype = run.target_dtype;
  c.target_num_hidden_layers = run.target_num_hidden_layers;
  return c;
}

}  // namespace eagle::head
