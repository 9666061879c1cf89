// Speculative decoding of held-out prompts (see decode.h).
#include "eagle/acceptance/decode.h"

#include <algorithm>
#include <cmath>

#include "eagle/head/draft_spec.h"

namespace eagle::acceptance {

std::optional<std::vector<std::int64_t>> eval_prompt(const data::Dataset& ds, std::size_t i) {
  for (std::int64_t p = 1; p < ds.length(i); ++p) {
    if (!ds.trained(i, p)) continue;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(p));
    for (std::int64_t q = 0; q < p; ++q) ids[q] = ds.token(i, q);
    return ids;
  }
  return std::nullopt;
}

std::vector<std::size_t> eval_prompt_samples(const data::Dataset& ds, std::int64_t num_prompts) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < ds.size() && static_cast<std::int64_t>(out.size()) < num_prompts; ++i)
    if (eval_prompt(ds, i)) out.push_back(i);
  return out;
}

std::vector<std::vector<std::int64_t>> eval_prompts(const data::Dataset& ds, std::int64_t num_prompts) {
  std::vector<std::vector<std::int64_t>> out;
  for (auto i : eval_prompt_samples(ds, num_prompts)) out.push_back(*eval_prompt(ds, i));
  return out;
}

bool is_eos(const target::TargetConfig& c, std::int64_t id) {
  return std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) != c.eos_token_ids.end();
}

void PromptAcceptance::add_round(std::int64_t drafts_accepted) {
  ++rounds;
  accepted += 1 + drafts_accepted;
  lengths.push_back(1 + drafts_accepted);
}

void AcceptanceResult::add(const PromptAcceptance& p) {
  per_prompt.push_back(p);
  ++prompts;
  rounds += p.rounds;
  generated += p.generated;
}

void AcceptanceResult::finish() {
  ar = ci95 = 0.0;
  if (rounds == 0) return;
  double sum = 0.0, sq = 0.0;
  for (const auto& p : per_prompt)
    for (auto l : p.lengths) sum += static_cast<double>(l);
  const auto m = static_cast<double>(rounds);
  ar = sum / m;
  for (const auto& p : per_prompt)
    for (auto l : p.lengths) sq += (static_cast<double>(l) - ar) * (static_cast<double>(l) - ar);
  ci95 = rounds > 1 ? 1.96 * std::sqrt(sq / (m - 1.0)) / std::sqrt(m) : 0.0;
}

AcceptanceResult AcceptanceResult::subset(const std::vector<std::size_t>& indices) const {
  AcceptanceResult r;
  for (auto i : indices) r.add(per_prompt.at(i));
  r.finish();
  return r;
}

PromptPrefill prefill_prompt(const target::TargetModel& target, target::KvCache& cache,
                             const std::vector<std::int64_t>& prompt) {
  const auto n = static_cast<std::int64_t>(prompt.size());
  PromptPrefill p;
  p.ids = torch::tensor(prompt, torch::kInt64).view({1, n}).to(target.device());
  auto out = target.forward_cached(cache, p.ids);
  p.last_logits = out.logits[0][n - 1];
  p.aux_hidden = out.aux_hidden;
  p.final_hidden = out.final_hidden;
  return p;
}

torch::Tensor PromptPrefill::next_ids(std::int64_t x) const {
  return torch::cat({ids.narrow(1, 1, ids.size(1) - 1), torch::full({1, 1}, x, ids.options())}, 1);
}

bool count_new_tokens(const target::TargetConfig& c, const std::vector<std::int64_t>& tokens,
                      std::int64_t max_new_tokens, std::int64_t& generated) {
  for (auto tok : tokens) {
    ++generated;
    if (is_eos(c, tok) || generated >= max_new_tokens) return true;
  }
  return false;
}

namespace {

// The prompt's prefill into the empty cache: copied from `kept` when it holds one, else computed (and
// kept there when given).
PromptPrefill prefill_or_copy(const target::TargetModel& target, target::KvCache& cache,
                              const std::vector<std::int64_t>& prompt, std::optional<PrefillSnapshot>* kept) {
  const auto n = static_cast<std::int64_t>(prompt.size());
  if (kept && kept->has_value()) {
    (*kept)->kv.write_into(cache);
    cache.length = n;
    return (*kept)->prefill;
  }
  auto start = prefill_prompt(target, cache, prompt);
  if (kept) *kept = PrefillSnapshot{target::KvPrefix::of(cache, 1, n), start};
  return start;
}

}  // namespace

PromptAcceptance decode_prompt(const target::TargetModel& target, head::DraftHead& head,
                               const std::vector<std::int64_t>& prompt, Proposer& proposer, Verifier& verifier,
                               std::int64_t max_new_tokens, std::optional<PrefillSnapshot>* kept) {
  torch::NoGradGuard no_grad;
  PromptAcceptance pa;
  // What the head reads of the target (its row of the draft table): the aux layers or the final hidden.
  const bool aux = head::draft_spec(head.config()).reads(head.config()).aux_hidden;
  const auto device = target.device();
  const auto capacity = static_cast<std::int64_t>(prompt.size()) + max_new_tokens + proposer.spare_slots() + 2;
  auto tcache = target.new_cache(1, capacity);
  auto hcache = head.new_cache(1, capacity);
  const auto start = prefill_or_copy(target, tcache, prompt, target.config().hybrid() ? nullptr : kept);
  std::int64_t x = verifier.first_token(start.last_logits);
  // The head's pending inputs: the target features of positions not yet in its cache, each with
  // the token that follows it.
  auto features = aux ? start.aux_hidden : start.final_hidden;
  auto next_ids = start.next_ids(x);
  pa.generated = 1;
  while (pa.generated < max_new_tokens && !is_eos(target.config(), x)) {
    const auto round = proposer.propose(head, hcache, features, next_ids, x);
    const auto& tree = round.tree;
    const auto before = tcache.length;
    const auto ids = torch::tensor(tree.token).view({1, -1}).to(device);
    auto vout = round.chain ? target.forward_cached(tcache, ids)
                            : target.forward_tree(tcache, ids, torch::tensor(tree.depth), tree.mask());
    const auto verdict = verifier.verify(tree, round.q, vout.logits[0]);
    const auto acc = static_cast<std::int64_t>(verdict.path.size()) - 1;
    pa.add_round(acc);
    const auto& hidden = aux ? vout.aux_hidden : vout.final_hidden;
    if (round.chain) {
      features = hidden.narrow(1, 0, 1 + acc);
      target.truncate(tcache, before + 1 + acc);
    } else {
      // The cache keeps the accepted path as if decoded as a chain (its keys and values, its linear states).
      features = hidden.index_select(1, torch::tensor(verdict.path).to(device));
      target.accept_tree_path(tcache, before, verdict.path);
    }
    std::vector<std::int64_t> accepted;
    for (std::size_t j = 1; j < verdict.path.size(); ++j)
      accepted.push_back(tree.token[static_cast<std::size_t>(verdict.path[j])]);
    accepted.push_back(verdict.next);
    next_ids = torch::tensor(accepted).view({1, -1}).to(device);
    x = verdict.next;
    if (count_new_tokens(target.config(), accepted, max_new_tokens, pa.generated)) break;
  }
  return pa;
}

AcceptanceResult decode_prompts(const target::TargetModel& target, head::DraftHead& head,
                                const std::vector<std::vector<std::int64_t>>& prompts, Proposer& proposer,
                                Verifier& verifier, std::int64_t max_new_tokens, PrefillStore* kept) {
  if (kept) kept->resize(prompts.size());
  AcceptanceResult r;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    r.add(decode_prompt(target, head, prompts[i], proposer, verifier, max_new_tokens, kept ? &(*kept)[i] : nullptr));
  r.finish();
  return r;
}

}  // namespace eagle::acceptance
