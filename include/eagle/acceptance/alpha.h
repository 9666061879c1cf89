// The analytic expected acceptance per TTT step at a temperature, alpha_k = sum_x min(p_T(x), q_T(x)),
// teacher-forced over held-out samples (docs/heads.md), and its chain estimate.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/acceptance/verify.h"
#include "eagle/data/dataset.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::acceptance {

struct AlphaResult {
  std::vector<double> alpha;   // per TTT step: the mean over scored positions of sum_x min(p_T, q_T)
  double chain = 1.0;          // 1 + sum_k prod_{j <= k} alpha_j (the expected acceptance length)
  std::int64_t positions = 0;  // positions scored at step 0
};

// alpha_k teacher-forced over the first num_prompts held-out samples with a trained token (whole
// samples): the head's TTT logits of step k at position t against the target's distribution at
// t + 1 + k, over the positions training scores (the predicted token trained, in the sample). q is
// one-hot at the head's argmax for greedy drafts. An EAGLE-3 head (DraftHead::ttt_logits).
AlphaResult analytic_alpha(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                           std::int64_t num_prompts, const SamplingSettings& s);
// sum_x min(p(x), q(x)) per row: p [rows, V] the target's sampling_probs, draft_logits [rows, V_d]
// the head's (q: sampling_probs of them over the draft ids, or one-hot at their argmax for greedy
// drafts, where the sum is p at the drafted token).
torch::Tensor acceptance_overlap(const torch::Tensor& p, const torch::Tensor& draft_logits,
                                 const torch::Tensor& vocab_ids, const SamplingSettings& s);
// The chain estimate of alpha: 1 + sum_k prod_{j <= k} alpha_j.
double alpha_chain(const std::vector<double>& alpha);

}  // namespace eagle::acceptance
