// Acceptance evaluation on held-out data: the head's losses, acc_k and tau (teacher-forced, as in
// training), and the real acceptance rate of greedy speculative decoding with KV caches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/data/plan.h"
#include "eagle/features/source.h"
#include "eagle/head/head.h"
#include "eagle/io/step_stats.h"
#include "eagle/run/summary.h"
#include "eagle/target/target.h"

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
  std::int64_t batch_size = 16;       // prompts decoded at once (1: one by one)
  std::int64_t max_cuda_graphs = 0;   // batched rounds' shapes graphed on a GPU (max_cuda_graphs)
  bool bf16 = false;
  // Tree acceptance (tree_eval.h; topk 0: none), sampled acceptance and alpha_k at a temperature
  // (sampled_eval.h; 0: none), in the order of tree_eval.h's TreeShape and SamplingSettings.
  std::int64_t tree_steps = 0, tree_topk = 0, tree_draft_tokens = 0;
  double temperature = 0.0, top_p = 1.0;
  bool sampled_drafts = false;
  std::uint64_t seed = 42;

  // The evaluation of a run: the run's batching without length grouping, eval_* options, and
  // eval_draft_len (0: ttt_steps, the head's own).
  static EvalSettings from(const config::Options& o, std::int64_t ttt_steps);
};

// One prompt's speculative decoding: its rounds, the tokens accepted over them (each round's
// accepted drafts plus the target's own token) and the tokens generated (eos included).
struct PromptAcceptance {
  std::int64_t rounds = 0, accepted = 0, generated = 0;
  bool operator==(const PromptAcceptance&) const = default;
};

struct AcceptanceResult {
  double ar = 0.0;                 // mean over rounds of (1 + accepted)
  std::int64_t rounds = 0, prompts = 0, generated = 0;
  std::vector<PromptAcceptance> per_prompt;  // in the order of eval_prompts
  void add(const PromptAcceptance& p);       // counts the prompt in (ar is set by finish)
  void finish();
};

// The prompt of a held-out sample: its tokens before the first trained one (at least one token);
// none when nothing in it trains.
std::optional<std::vector<std::int64_t>> eval_prompt(const data::Dataset& ds, std::size_t i);
// The prompts of the first held-out samples that have one, at most num_prompts.
std::vector<std::vector<std::int64_t>> eval_prompts(const data::Dataset& ds, std::int64_t num_prompts);
bool is_eos(const target::TargetConfig& c, std::int64_t id);  // one of the target's eos ids

// The target's forward over a prompt into an empty KV cache: what every decoding of the
// evaluation starts from.
struct PromptPrefill {
  torch::Tensor ids;          // [1, n] int64 on the target's device
  torch::Tensor last_logits;  // [V] fp32: the target's logits after the prompt
  torch::Tensor aux_hidden, final_hidden;  // [1, n, .] the prompt's features
  // The head's first pending inputs once the target chose x: each prompt position's token after it.
  torch::Tensor next_ids(std::int64_t x) const;
};
PromptPrefill prefill_prompt(const target::TargetModel& target, target::KvCache& cache,
                             const std::vector<std::int64_t>& prompt);

// Counts a round's new tokens (accepted drafts, then the target's own) into generated, stopping at
// eos or max_new_tokens as the target's own greedy decoding would: true when the prompt is done.
bool count_new_tokens(const target::TargetConfig& c, const std::vector<std::int64_t>& tokens,
                      std::int64_t max_new_tokens, std::int64_t& generated);

// Greedy speculative decoding: for each prompt (a held-out sample cut before its first trained
// token) the head drafts draft_len tokens a round, the target verifies them in one forward, the
// longest matching prefix is accepted plus the target's own next token; stops at max_new_tokens
// or the target's eos.
AcceptanceResult acceptance_rate(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                                 std::int64_t num_prompts, std::int64_t max_new_tokens, std::int64_t draft_len);
// The same decoding of many prompts at once (batched_acceptance.cpp): batch_size rows of ragged KV
// caches for the target and the head, a row refilled with the next prompt when its prompt ends; on
// a GPU the rounds' fixed-shape steps (verify, draft) replay CUDA graphs. Equal per prompt to
// acceptance_rate (up to the rounding of batched matrix products); needs head.drafts_ragged().
AcceptanceResult batched_acceptance_rate(const target::TargetModel& target, head::DraftHead& head,
                                         const data::Dataset& heldout, std::int64_t num_prompts,
                                         std::int64_t max_new_tokens, std::int64_t draft_len, std::int64_t batch_size,
                                         std::int64_t max_cuda_graphs = 0);

// The acceptance metrics beyond the greedy chain AR that settings ask for (eval_metrics.cpp): the
// tree AR, the sampled AR with its 95% half-width, alpha_k and their chain estimate, into stats.
void extra_acceptance(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                      const EvalSettings& settings, io::EvalStats& stats);

// What --best_metric selects of an evaluation: its name in best.json and a value where higher is
// better (loss: "neg_eval_loss", the negated held-out loss; ar without an AR measured: tau, as
// before best_metric existed); no value when that metric was not measured.
struct SelectedMetric {
  std::string name;
  std::optional<double> value;
};
SelectedMetric selected_metric(const io::EvalStats& stats, config::BestMetric metric);
// The AR metric min_ar gates for a best_metric: itself, and the chain AR for loss.
std::string gate_metric(config::BestMetric metric);
// The evaluation's metrics into a run summary (every one measured, the best and gate metrics' names).
void record_metrics(const io::EvalStats& stats, config::BestMetric metric, run::RunSummary& summary);

// Held-out losses/acc/tau plus the AR, as logged (step is the optimizer step evaluated at), over the
// first max_samples held-out samples, whose head inputs come from `features` (a source over the
// held-out data). The loss is normalised like one optimizer step over all of them (the
// denominators are their summed counts), so it does not depend on how they are batched:
// `eagle-train eval` with the run's data options and bf16 reproduces the run's own evaluation.
// The AR needs the whole target: without one (offline training without --model_name_or_path) it
// is left out.
io::EvalStats evaluate(const features::FeatureSource& features, const target::TargetModel* target,
                       head::DraftHead& head, const data::Dataset& heldout, const EvalSettings& settings,
                       std::int64_t step);

}  // namespace eagle::train
