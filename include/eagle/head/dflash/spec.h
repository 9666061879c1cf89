// The DFlash row of the draft table (draft_spec.h): vLLM's DFlash block draft.
#pragma once

#include "eagle/head/dflash/head.h"
#include "eagle/head/draft_spec.h"

namespace eagle::head {

const DraftSpec& dflash_spec();

// The DFlash settings of a run for this target: mask_token_id -1 is the target's first
// end-of-sequence id (Error(usage) naming mask_token_id when it has none).
DFlashSettings dflash_settings(const HeadSettings& s, const target::TargetConfig& target);

// One batch's block anchors [B, N] int64 on the host, drawn by `generator` (dflash_sample_anchors over
// the batch's loss mask and documents), and the valid slots per k they give ([block - 1],
// dflash_count_slots): the loss denominators of the batches that share one normalisation are their sums.
struct DFlashAnchors {
  torch::Tensor anchors;
  std::vector<std::int64_t> slots;
};
DFlashAnchors dflash_batch_anchors(const data::Batch& batch, const HeadConfig& cfg, at::Generator generator);

// The row's resume rule (a kind built on DFlash's backbone shares it): mask_token_id and dflash_target_layers
// rewritten to what the checkpoint's head resolved.
void dflash_resolve_resume(const HeadConfig& head, nlohmann::json& before, nlohmann::json& now);

}  // namespace eagle::head
