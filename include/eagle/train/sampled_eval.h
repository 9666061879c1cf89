// Acceptance at a sampling temperature: speculative sampling with the standard rejection rule
// (a draft token x is accepted with probability min(1, p(x) / q(x)), else the token is resampled
// from the normalised max(0, p - q)), and the analytic expected acceptance per TTT step,
// alpha_k = sum_x min(p_T(x), q_T(x)), teacher-forced over held-out tokens (docs/heads.md).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::train {

struct SamplingSettings {
  double temperature = 0.0;     // > 0
  double top_p = 1.0;           // in (0, 1]
  bool sampled_drafts = false;  // false: the head's argmax (q one-hot, vLLM's default)
  std::uint64_t seed = 42;
};

// The distribution sampled from: softmax(logits / temperature) [.., V] (fp64), restricted to the
// smallest set of the most likely tokens whose mass reaches top_p (generate's rule) and renormalised.
torch::Tensor sampling_probs(const torch::Tensor& logits, double temperature, double top_p);

struct SampledResult {
  double ar = 0.0;    // mean over rounds of (1 + accepted)
  double ci95 = 0.0;  // half-width of its 95% confidence interval (1.96 * sd / sqrt(rounds))
  std::int64_t rounds = 0, prompts = 0, generated = 0;
};

// The verification of one round (host side, fp64): p [K + 1, V] the target's distributions after
// the root and after each draft token, q [K, V] the draft's (one-hot rows for greedy drafts),
// drafted [K] target ids. Returns the accepted count and the token that follows them (the
// resampled one at the first rejection, else a sample of p's last row). u() draws uniform [0, 1).
struct RoundOutcome {
  std::int64_t accepted = 0, next = 0;
};
RoundOutcome verify_sampled(const torch::Tensor& p, const torch::Tensor& q, const std::vector<std::int64_t>& drafted,
                            const std::function<double()>& u);

// Speculative sampling over the prompts acceptance_rate decodes, draft_len tokens a round, seeded:
// the same settings give the same result. An EAGLE-3 head (Error(usage) otherwise).
SampledResult sampled_acceptance_rate(const target::TargetModel& target, head::DraftHead& head,
                                      const data::Dataset& heldout, std::int64_t num_prompts,
                                      std::int64_t max_new_tokens, std::int64_t draft_len, const SamplingSettings& s);

struct AlphaResult {
  std::vector<double> alpha;   // per TTT step: the mean over scored positions of sum_x min(p_T, q_T)
  double chain = 1.0;          // 1 + sum_k prod_{j <= k} alpha_j (the expected acceptance length)
  std::int64_t positions = 0;  // positions scored at step 0
};

// alpha_k teacher-forced over the first num_prompts held-out samples with a trained token (whole
// samples): the head's TTT logits of step k at position t against the target's distribution at
// t + 1 + k, over the positions training scores (the predicted token trained, in the sample). q is
// one-hot at the head's argmax for greedy drafts.
AlphaResult analytic_alpha(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                           std::int64_t num_prompts, const SamplingSettings& s);
// sum_x min(p(x), q(x)) per row: p [rows, V] the target's sampling_probs, draft_logits [rows, V_d]
// the head's (q: sampling_probs of them over the draft ids, or one-hot at their argmax for greedy
// drafts, where the sum is p at the drafted token).
torch::Tensor acceptance_overlap(const torch::Tensor& p, const torch::Tensor& draft_logits,
                                 const torch::Tensor& vocab_ids, const SamplingSettings& s);
// The chain estimate of alpha: 1 + sum_k prod_{j <= k} alpha_j.
double alpha_chain(const std::vector<double>& alpha);

}  // namespace eagle::train
