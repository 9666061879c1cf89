// The acceptance metrics of an evaluation, as the trainer and `eagle-train eval` measure them: the
// greedy chain AR (batched or one prompt at a time), then the tree AR, the sampled AR of chains and
// of trees and alpha_k as the settings ask (docs/heads.md, "Acceptance metrics").
#pragma once

#include <cstdint>

#include "eagle/acceptance/tree.h"
#include "eagle/acceptance/verify.h"
#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/head/head.h"
#include "eagle/io/step_stats.h"
#include "eagle/target/target.h"

namespace eagle::util {
class ProgressDisplay;
}

namespace eagle::acceptance {

struct AcceptanceSettings {
  std::int64_t num_prompts = 16;  // prompts decoded speculatively; 0: none
  std::int64_t max_new_tokens = 64;
  std::int64_t draft_len = 3;        // tokens the head drafts per round (chains); ar_by_depth: depths 1..draft_len
  std::int64_t batch_size = 16;      // prompts of the greedy chain decoded at once (1: one by one)
  std::int64_t max_cuda_graphs = 0;  // batched rounds' shapes graphed on a GPU (max_cuda_graphs)
  TreeShape tree;                    // topk 0: no tree
  SamplingSettings sampling;         // temperature 0: no sampled metrics
  // The progress line of the eval command (not owned; null: none, as in training's evaluations): after each
  // depth pass, the prompts, the running AR, tokens/s, elapsed and ETA; off a terminal, a log line at most
  // every 30 s, so a short evaluation prints none.
  util::ProgressDisplay* progress = nullptr;

  // eval_* options; eval_draft_len 0: ttt_steps, the head's own; eval_tree_steps 0: the draft length;
  // eval_tree_draft_tokens 0: steps + 1.
  static AcceptanceSettings from(const config::Options& o, std::int64_t ttt_steps);
};

using AcceptanceStats = io::AcceptanceStats;

// What the settings ask of this head that it cannot do (its row's DraftLimits), as Error(usage) naming
// the option: a tree where the head drafts none (EAGLE-1, P-EAGLE, DFlash), a round longer than it drafts
// (DFlash: dflash_block_size - 1). measure() checks it; the trainer and eval call it before anything
// is measured.
void check_head_settings(const head::HeadConfig& head, const AcceptanceSettings& settings);

// The ar_by_category entry of the prompts without a category, when others have one.
inline constexpr const char* kNoCategory = "(none)";

// Every metric the settings ask for, over the same prompts (eval_prompts of heldout): ar and ar_ci95 (the
// greedy chain at draft_len); ar_by_depth (one greedy chain pass per depth k = 1..draft_len, batched as ar:
// its last entry is ar, entry k-1 equals ar measured with draft_len k); ar_by_category when a prompt's
// sample has a category (the same passes, each category's prompts alone: their count, ar, ar_ci95 and
// ar_by_depth; the counts add up to the prompts decoded); tree_ar (tree.on()); at a
// temperature temp_ar and its ci95 (chains: ChainProposer, or ParallelProposer for P-EAGLE heads),
// tree_temp_ar and its ci95 with a tree, alpha and alpha_ar. Each sampled decoding draws from its own
// Uniform seeded by sampling.seed.
AcceptanceStats measure(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                        const AcceptanceSettings& settings);

}  // namespace eagle::acceptance
