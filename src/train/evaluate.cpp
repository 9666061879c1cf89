// Held-out evaluation and the real acceptance rate (see evaluate.h).
#include "eagle/train/evaluate.h"

#include <chrono>
#include <limits>
#include <numeric>

#include "eagle/config/option_table.h"
#include "eagle/data/sampler.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/train/micro_batch.h"
#include "eagle/util/log.h"

namespace eagle::train {

std::optional<std::vector<std::int64_t>> eval_prompt(const data::Dataset& ds, std::size_t i) {
  for (std::int64_t p = 1; p < ds.length(i); ++p) {
    if (!ds.trained(i, p)) continue;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(p));
    for (std::int64_t q = 0; q < p; ++q) ids[q] = ds.token(i, q);
    return ids;
  }
  return std::nullopt;
}

std::vector<std::vector<std::int64_t>> eval_prompts(const data::Dataset& ds, std::int64_t num_prompts) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < ds.size() && static_cast<std::int64_t>(out.size()) < num_prompts; ++i)
    if (auto p = eval_prompt(ds, i)) out.push_back(std::move(*p));
  return out;
}

bool is_eos(const target::TargetConfig& c, std::int64_t id) {
  return std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) != c.eos_token_ids.end();
}

void AcceptanceResult::add(const PromptAcceptance& p) {
  per_prompt.push_back(p);
  ++prompts;
  rounds += p.rounds;
  generated += p.generated;
}

void AcceptanceResult::finish() {
  std::int64_t accepted = 0;
  for (const auto& p : per_prompt) accepted += p.accepted;
  ar = rounds ? static_cast<double>(accepted) / static_cast<double>(rounds) : 0.0;
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

AcceptanceResult acceptance_rate(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                                 std::int64_t num_prompts, std::int64_t max_new_tokens, std::int64_t draft_len) {
  torch::NoGradGuard no_grad;
  AcceptanceResult r;
  const bool eagle3 = head.config().eagle_version == 3;
  const auto device = target.device();
  for (const auto& prompt : eval_prompts(heldout, num_prompts)) {
    PromptAcceptance pa;
    const auto n = static_cast<std::int64_t>(prompt.size());
    const std::int64_t capacity = n + max_new_tokens + draft_len + 2;
    auto tcache = target.new_cache(1, capacity);
    auto hcache = head.new_cache(1, capacity);
    const auto start = prefill_prompt(target, tcache, prompt);
    std::int64_t x = start.last_logits.argmax(-1).item<std::int64_t>();
    // The head's pending inputs: the target features of positions not yet in its cache, each with
    // the token that follows it.
    auto features = eagle3 ? start.aux_hidden : start.final_hidden;
    auto next_ids = start.next_ids(x);
    pa.generated = 1;
    while (pa.generated < max_new_tokens && !is_eos(target.config(), x)) {
      auto drafted = head.draft(hcache, features, next_ids, draft_len);  // [1, K]
      auto verify = torch::cat({torch::full({1, 1}, x, next_ids.options()), drafted.to(device)}, 1);
      const std::int64_t before = tcache.length;
      auto vout = target.forward_cached(tcache, verify);
      auto greedy = vout.logits.argmax(-1).view({-1}).cpu();  // the target's choice after each token
      auto d = drafted.view({-1}).cpu();
      std::int64_t acc = 0;
      while (acc < draft_len && d[acc].item<std::int64_t>() == greedy[acc].item<std::int64_t>()) ++acc;
      const std::int64_t bonus = greedy[acc].item<std::int64_t>();
      ++pa.rounds;
      pa.accepted += 1 + acc;
      target.truncate(tcache, before + 1 + acc);
      features = (eagle3 ? vout.aux_hidden : vout.final_hidden).narrow(1, 0, 1 + acc);
      next_ids = torch::cat({drafted.to(device).narrow(1, 0, acc), torch::full({1, 1}, bonus, next_ids.options())}, 1);
      std::vector<std::int64_t> tokens(d.data_ptr<std::int64_t>(), d.data_ptr<std::int64_t>() + acc);
      tokens.push_back(bonus);
      x = bonus;
      if (count_new_tokens(target.config(), tokens, max_new_tokens, pa.generated)) break;
    }
    r.add(pa);
  }
  r.finish();
  return r;
}

EvalSettings EvalSettings::from(const config::Options& o, std::int64_t ttt_steps) {
  EvalSettings s{data::SamplerOptions::from(o),
                 kMaxEvalSamples,
                 o.eval_num_prompts,
                 o.eval_max_new_tokens,
                 o.eval_draft_len > 0 ? o.eval_draft_len : ttt_steps,
                 o.eval_batch_size,
                 o.max_cuda_graphs,
                 o.bf16};
  s.batching.group_by_length = false;
  s.tree_topk = o.eval_tree_topk;
  s.tree_steps = o.eval_tree_steps > 0 ? o.eval_tree_steps : s.draft_len;
  s.tree_draft_tokens = o.eval_tree_draft_tokens > 0 ? o.eval_tree_draft_tokens : s.tree_steps + 1;
  config::check_tree_draft_tokens(o, s.tree_steps);  // the head's steps: known here (issue 41 item 17)
  s.temperature = o.eval_temperature;
  s.top_p = o.eval_top_p;
  s.sampled_drafts = o.eval_draft_sampling == config::DraftSampling::sample;
  s.seed = static_cast<std::uint64_t>(o.seed);
  return s;
}

io::EvalStats evaluate(const features::FeatureSource& features, const target::TargetModel* target,
                       head::DraftHead& head, const data::Dataset& heldout, const EvalSettings& settings,
                       std::int64_t step) {
  torch::NoGradGuard no_grad;
  io::EvalStats stats;
  stats.step = step;
  const auto steps = head.config().steps();
  std::vector<std::size_t> first(std::min<std::size_t>(heldout.size(), static_cast<std::size_t>(settings.max_samples)));
  std::iota(first.begin(), first.end(), std::size_t{0});
  const data::Dataset evaluated = first.size() < heldout.size() ? heldout.subset(first) : heldout;
  data::Sampler sampler(evaluated.lengths(), settings.batching);
  std::vector<data::Batch> batches;
  for (std::int64_t b = 0, n = sampler.batches_in_epoch(0); b < n; ++b)
    batches.push_back(data::make_batch(evaluated, sampler.next()));
  const auto device = features.device();
  const auto denominators = denominator_tensor(loss_denominators(batches, steps)).to(device);
  auto sums = torch::zeros({steps, head::kMetricColumns}, torch::TensorOptions().device(device));
  auto loss = torch::zeros({}, sums.options());
  for (const auto& batch : batches) {
    auto tensors = features.allocate(batch, /*max_segments=*/0);  // eager: the row length bounds it
    features.fill(batch, tensors);
    auto out = forward_micro_batch(features, head, tensors, denominators, settings.bf16);
    sums += out.metric_sums;
    loss += out.loss;
  }
  auto summary = summarize_metrics(sums.cpu());
  // Nothing scored (no held-out position trains): no loss, as on the step line, never 0.
  stats.loss = summary.positions > 0 ? loss.item<double>() : std::numeric_limits<double>::quiet_NaN();
  if (summary.positions == 0)
    log::warn("eval",
              "no held-out position was scored: eval loss n/a (a trained token needs two tokens before it "
              "in its sample; check the held-out data's loss masks)");
  stats.acc = summary.acc;
  stats.tau = summary.tau;
  if (settings.num_prompts > 0 && target != nullptr) {
    const auto start = std::chrono::steady_clock::now();
    const bool batched = settings.batch_size > 1 && head.drafts_ragged();
    auto ar = batched
                  ? batched_acceptance_rate(*target, head, heldout, settings.num_prompts, settings.max_new_tokens,
                                            settings.draft_len, settings.batch_size, settings.max_cuda_graphs)
                  : acceptance_rate(*target, head, heldout, settings.num_prompts, settings.max_new_tokens,
                                    settings.draft_len);
    if (ar.rounds > 0) stats.ar = ar.ar;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log::info("eval", "AR over {} prompts ({} at a time): {} rounds, {} tokens in {:.2f} s", ar.prompts,
              batched ? std::min(settings.batch_size, ar.prompts) : 1, ar.rounds, ar.generated, seconds);
    extra_acceptance(*target, head, heldout, settings, stats);
  }
  return stats;
}

}  // namespace eagle::train
