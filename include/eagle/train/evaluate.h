// Acceptance evaluation on held-out data: the head's losses, acc_k and tau (teacher-forced, as in
// training), and the real acceptance rate of greedy speculative decoding with KV caches.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/data/plan.h"
#include "eagle/features/source.h"
#include "eagle/io/step_stats.h"
#include "eagle/model/head.h"
#include "eagle/model/target.h"

namespace eagle::train {

// Held-out samples read for the losses (the first ones of the split, which is already a random
// draw): enough for stable numbers, bounded so a large held-out set does not make every
// evaluation long. A count of samples, not of batches, so the numbers do not depend on batching.
inline constexpr std::int64_t kMaxEvalSamples = 512;

struct EvalSettings {
  data::SamplerOptions batching;      // batches of the held-out split (one pass, fixed order)
  std::int64_t max_samples = kMaxEvalSamples;
  std::int64_t num_prompts = 16;      // prompts decoded speculatively; 0: no AR
  std::int64_t max_new_tokens = 64;
  std::int64_t draft_len = 3;         // tokens the head drafts per round
  bool bf16 = false;

  // The evaluation of a run: the run's batching without length grouping, eval_* options, and
  // eval_draft_len (0: ttt_steps, the head's own).
  static EvalSettings from(const config::Options& o, std::int64_t ttt_steps);
};

struct AcceptanceResult {
  double ar = 0.0;                 // mean over rounds of (1 + accepted)
  std::int64_t rounds = 0, prompts = 0, generated = 0;
};

// Greedy speculative decoding: for each prompt (a held-out sample cut before its first trained
// token) the head drafts draft_len tokens a round, the target verifies them in one forward, the
// longest matching prefix is accepted plus the target's own next token; stops at max_new_tokens
// or the target's eos.
AcceptanceResult acceptance_rate(const model::TargetModel& target, model::DraftHead& head,
                                 const data::Dataset& heldout, std::int64_t num_prompts,
                                 std::int64_t max_new_tokens, std::int64_t draft_len);

// Held-out losses/acc/tau plus the AR, as logged (step is the optimizer step evaluated at), over the
// first max_samples held-out samples, whose head inputs come from `features` (a source over the
// held-out data). The loss is normalised like one optimizer step over all of them (the
// denominators are their summed counts), so it does not depend on how they are batched:
// `eagle-train eval` with the run's data options and bf16 reproduces the run's own evaluation.
// The AR needs the whole target: without one (offline training without --model_name_or_path) it
// is left out.
io::EvalStats evaluate(const features::FeatureSource& features, const model::TargetModel* target,
                       model::DraftHead& head, const data::Dataset& heldout, const EvalSettings& settings,
                       std::int64_t step);

}  // namespace eagle::train
