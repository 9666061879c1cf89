// The DFlash row of the draft table (draft_spec.h): vLLM's DFlash block draft.
#pragma once

#include "eagle/head/dflash/head.h"
#include "eagle/head/draft_spec.h"

namespace eagle::head {

const DraftSpec& dflash_spec();

// A block draft's config (the kind's shape) with the run's fields every block draft records: the loss, its
// chunk size, the target's name and architecture.
HeadConfig with_run_fields(HeadConfig cfg, const HeadSettings& s, const target::TargetConfig& target);

// The DFlash settings of a run for this target: mask_token_id -1 is the target's first
// end-of-sequence id (Error(usage) naming mask_token_id when it has none).
DFlashSettings dflash_settings(const HeadSettings& s, const target::TargetConfig& target);

// One batch's block anchors [B, N] int64 on the host, drawn by `generator` (dflash_sample_anchors over
// the batch's loss mask and documents), and the valid slots per k they give ([span - 1],
// dflash_count_slots): the loss denominators of the batches that share one normalisation are their sums.
// span: the positions from the anchor to the last label (0: the block; DSpark's: the block + 1).
struct DFlashAnchors {
  torch::Tensor anchors;
  std::vector<std::int64_t> slots;
};
DFlashAnchors dflash_batch_anchors(const data::Batch& batch, const HeadConfig& cfg, at::Generator generator,
                                   std::int64_t span = 0);

// The loss plan of an anchored block draft whose labels reach span - 1 positions past the anchor: each batch's
// anchors (dflash_batch_anchors, keyed by (seed, step, batch, rank): a resume draws the same) and their valid
// slots summed ([span - 1]). DFlash's span is its block, DSpark's the block + 1.
LossPlan anchored_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed,
                            std::int64_t span);
// Whether some sample, truncated at max_len, holds a trained anchor a with a + span - 1 inside it and a trained
// position among a + 1 .. a + span - 1 (what anchored_loss_plan can train on).
bool has_anchored_span(const data::Dataset& train, std::int64_t span, std::int64_t max_len);

// The row's resume rule (a kind built on DFlash's backbone shares it): mask_token_id and dflash_target_layers
// rewritten to what the checkpoint's head resolved.
void dflash_resolve_resume(const HeadConfig& head, nlohmann::json& before, nlohmann::json& now);

}  // namespace eagle::head
