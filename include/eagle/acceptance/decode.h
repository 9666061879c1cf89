// Speculative decoding of held-out prompts, written once: the prompts (each held-out sample cut
// before its first trained token), the target's prefill, and one loop that asks a Proposer for each
// round's drafts and a Verifier for what the target keeps, until eos or max_new_tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "eagle/acceptance/propose.h"
#include "eagle/acceptance/verify.h"
#include "eagle/data/dataset.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::acceptance {

// One prompt's speculative decoding: its rounds, the tokens accepted over them (each round's
// accepted drafts plus the target's own token), each round's length (1 + its accepted drafts) and
// the tokens generated (eos included).
struct PromptAcceptance {
  std::int64_t rounds = 0, accepted = 0, generated = 0;
  std::vector<std::int64_t> lengths;
  void add_round(std::int64_t drafts_accepted);
  bool operator==(const PromptAcceptance&) const = default;
};

struct AcceptanceResult {
  double ar = 0.0;    // mean over rounds of (1 + accepted)
  double ci95 = 0.0;  // half-width of ar's 95% confidence interval: 1.96 sd / sqrt(rounds) (0 for one round)
  std::int64_t rounds = 0, prompts = 0, generated = 0;
  std::vector<PromptAcceptance> per_prompt;  // in the order of the prompts
  void add(const PromptAcceptance& p);       // counts the prompt in (ar and ci95 are set by finish)
  void finish();
  // The result of the prompts at `indices` of per_prompt alone (finished): a category's share.
  AcceptanceResult subset(const std::vector<std::size_t>& indices) const;
};

// The prompt of a held-out sample: its tokens before the first trained one (at least one token);
// none when nothing in it trains.
std::optional<std::vector<std::int64_t>> eval_prompt(const data::Dataset& ds, std::size_t i);
// The first held-out samples that have a prompt, at most num_prompts: their indices in ds, and their prompts.
std::vector<std::size_t> eval_prompt_samples(const data::Dataset& ds, std::int64_t num_prompts);
std::vector<std::vector<std::int64_t>> eval_prompts(const data::Dataset& ds, std::int64_t num_prompts);
bool is_eos(const target::TargetConfig& c, std::int64_t id);  // one of the target's eos ids

// The target's forward over a prompt into an empty KV cache: what every decoding starts from.
struct PromptPrefill {
  torch::Tensor ids;                       // [1, n] int64 on the target's device
  torch::Tensor last_logits;               // [V] fp32: the target's logits after the prompt
  torch::Tensor aux_hidden, final_hidden;  // [1, n, .] the prompt's features
  // The head's first pending inputs once the target chose x: each prompt position's token after it.
  torch::Tensor next_ids(std::int64_t x) const;
};
PromptPrefill prefill_prompt(const target::TargetModel& target, target::KvCache& cache,
                             const std::vector<std::int64_t>& prompt);

// Each prompt's prefill, kept at its first decoding for the next ones of the same prompts (measure()'s
// depths and modes): the target's cache columns [0, n) and the prefill's outputs, so that a decoding
// copies them into its new cache instead of running the forward again (the same forward on the same
// inputs: bit for bit; the cache's capacity is not read by it). Not kept for targets whose cache holds
// more than keys and values (the hybrids' states).
struct PrefillSnapshot {
  target::KvPrefix kv;  // the cache's columns [0, n)
  PromptPrefill prefill;
};
using PrefillStore = std::vector<std::optional<PrefillSnapshot>>;  // one per prompt, in order

// Counts a round's new tokens (accepted drafts, then the target's own) into generated, stopping at
// eos or max_new_tokens as the target's own decoding would: true when the prompt is done.
bool count_new_tokens(const target::TargetConfig& c, const std::vector<std::int64_t>& tokens,
                      std::int64_t max_new_tokens, std::int64_t& generated);

// One prompt: prefill, the verifier's first token, then rounds of proposer.propose, one target
// forward over the round's tree (forward_cached for a chain, forward_tree otherwise), the verifier's
// verdict, the accepted nodes' keys and values moved after the root's slot (a tree), and the
// accepted positions' features as the head's next pending inputs. kept: the prompt's prefill, taken
// from it when it holds one, else kept in it (nullptr: prefilled and not kept).
PromptAcceptance decode_prompt(const target::TargetModel& target, head::DraftHead& head,
                               const std::vector<std::int64_t>& prompt, Proposer& proposer, Verifier& verifier,
                               std::int64_t max_new_tokens, std::optional<PrefillSnapshot>* kept = nullptr);
// decode_prompt over every prompt in order, one by one; kept: one entry per prompt (or nullptr).
AcceptanceResult decode_prompts(const target::TargetModel& target, head::DraftHead& head,
                                const std::vector<std::vector<std::int64_t>>& prompts, Proposer& proposer,
                                Verifier& verifier, std::int64_t max_new_tokens, PrefillStore* kept = nullptr);

}  // namespace eagle::acceptance
