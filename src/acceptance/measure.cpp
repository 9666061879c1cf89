// The acceptance metrics of an evaluation (see measure.h).
#include "eagle/acceptance/measure.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "eagle/acceptance/alpha.h"
#include "eagle/acceptance/batched.h"
#include "eagle/acceptance/decode.h"
#include "eagle/acceptance/propose.h"
#include "eagle/config/option_table.h"
#include "eagle/head/draft_spec.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "eagle/util/progress.h"

namespace eagle::acceptance {

AcceptanceSettings AcceptanceSettings::from(const config::Options& o, std::int64_t ttt_steps) {
  AcceptanceSettings s;
  s.num_prompts = o.eval_num_prompts;
  s.max_new_tokens = o.eval_max_new_tokens;
  s.draft_len = o.eval_draft_len > 0 ? o.eval_draft_len : ttt_steps;
  s.batch_size = o.eval_batch_size;
  s.max_cuda_graphs = o.max_cuda_graphs;
  s.tree.topk = o.eval_tree_topk;
  s.tree.steps = o.eval_tree_steps > 0 ? o.eval_tree_steps : s.draft_len;
  s.tree.draft_tokens = o.eval_tree_draft_tokens > 0 ? o.eval_tree_draft_tokens : s.tree.steps + 1;
  config::check_tree_draft_tokens(o, s.tree.steps);  // the head's steps are known here (issue 41 item 17)
  config::check_best_metric_depth(o, s.draft_len);
  s.sampling = {o.eval_temperature, o.eval_top_p, o.eval_draft_sampling == config::DraftSampling::sample,
                static_cast<std::uint64_t>(o.seed)};
  return s;
}

namespace {

// The greedy chain over the prompts drafting draft_len tokens a round: batched where the head can.
// Each prompt is prefilled once: batched, the first prompts' prefill is computed at the first depth and
// reused at the others (reuse); one by one, every prompt's (kept, for the depths and the other modes).
AcceptanceResult greedy_chain(const target::TargetModel& target, head::DraftHead& head,
                              const std::vector<std::vector<std::int64_t>>& prompts, const AcceptanceSettings& s,
                              std::int64_t draft_len, bool batched, PrefillReuse& reuse, PrefillStore& kept) {
  if (batched)
    return batched_acceptance(target, head, prompts, s.max_new_tokens, draft_len, s.batch_size, s.max_cuda_graphs,
                              &reuse);
  ChainProposer proposer(draft_len);
  GreedyVerifier verifier;
  return decode_prompts(target, head, prompts, proposer, verifier, s.max_new_tokens, &kept);
}

double ar_or_nan(const AcceptanceResult& r) {
  return r.rounds > 0 ? r.ar : std::numeric_limits<double>::quiet_NaN();
}

// The chain AR (at each depth) of each category's prompts; none when no prompt has a category.
std::map<std::string, io::CategoryAcceptance> by_category(const data::Dataset& heldout,
                                                          const std::vector<std::size_t>& samples,
                                                          const std::vector<AcceptanceResult>& by_depth) {
  std::map<std::string, std::vector<std::size_t>> prompts_of;
  bool any = false;
  for (std::size_t j = 0; j < samples.size(); ++j) {
    const auto& name = heldout.category(samples[j]);
    any = any || !name.empty();
    prompts_of[name.empty() ? std::string(kNoCategory) : name].push_back(j);
  }
  std::map<std::string, io::CategoryAcceptance> out;
  if (!any) return out;
  for (const auto& [name, prompts] : prompts_of) {
    auto& c = out[name];
    c.count = static_cast<std::int64_t>(prompts.size());
    for (const auto& depth : by_depth) c.ar_by_depth.push_back(ar_or_nan(depth.subset(prompts)));
    const auto chain = by_depth.back().subset(prompts);
    c.ar = ar_or_nan(chain);
    c.ar_ci95 = chain.ci95;
  }
  return out;
}

}  // namespace

void check_head_settings(const head::HeadConfig& h, const AcceptanceSettings& s) {
  const auto& spec = head::draft_spec(h);
  const auto limits = spec.limits(h);
  EAGLE_CHECK(limits.no_tree.empty() || !s.tree.on(), Error(ErrorKind::usage, limits.no_tree)
                                                          .place("eval_tree_topk")
                                                          .expected("0 (chains, greedy or at eval_temperature)")
                                                          .found(std::to_string(s.tree.topk)));
  EAGLE_CHECK(limits.max_draft_len == 0 || s.draft_len <= limits.max_draft_len,
              Error(ErrorKind::usage,
                    fmt::format("{} draft proposes at most {} a round", spec.noun, limits.max_draft_len_what))
                  .place("eval_draft_len")
                  .expected(fmt::format("at most {} ({})", limits.max_draft_len, limits.max_draft_len_name))
                  .found(std::to_string(s.draft_len)));
}

AcceptanceStats measure(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                        const AcceptanceSettings& s) {
  torch::NoGradGuard no_grad;
  check_head_settings(head.config(), s);
  AcceptanceStats out;
  const auto samples = eval_prompt_samples(heldout, s.num_prompts);
  std::vector<std::vector<std::int64_t>> prompts;
  for (auto i : samples) prompts.push_back(*eval_prompt(heldout, i));
  const auto start = std::chrono::steady_clock::now();
  // A head that drafts one sequence at a time decodes the prompts one by one, the same acceptance per prompt.
  const bool batched = s.batch_size > 1 && head.drafts_ragged();
  // One pass per depth k = 1..K over the same prompts; the last is the chain AR at the draft length.
  EAGLE_CHECK(s.draft_len >= 1, Error(ErrorKind::internal, "the acceptance evaluation drafts no token")
                                    .found(std::to_string(s.draft_len)));
  std::vector<AcceptanceResult> by_depth;
  PrefillReuse reuse;
  PrefillStore kept;
  const util::ProgressLine line("eval");
  std::int64_t tokens = 0;
  for (std::int64_t k = 1; k <= s.draft_len; ++k) {
    by_depth.push_back(greedy_chain(target, head, prompts, s, k, batched, reuse, kept));
    tokens += by_depth.back().generated;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s.progress != nullptr && s.progress->due(elapsed, false)) {
      const double done = static_cast<double>(k) / static_cast<double>(s.draft_len);
      line.show(*s.progress, done,
                fmt::format("depth {}/{} over {} prompts, AR {:.3f} | {:.0f} tok/s | {} elapsed | {}", k, s.draft_len,
                            by_depth.back().prompts, ar_or_nan(by_depth.back()),
                            static_cast<double>(tokens) / std::max(elapsed, 1e-9), util::format_duration(elapsed),
                            util::format_eta(done, 1.0, elapsed)),
                elapsed, false);
    }
  }
  const AcceptanceResult& chain = by_depth.back();
  if (chain.rounds > 0) {
    out.ar = chain.ar;
    out.ar_ci95 = chain.ci95;
    for (const auto& r : by_depth) out.ar_by_depth.push_back(ar_or_nan(r));
    out.ar_by_category = by_category(heldout, samples, by_depth);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("eval",
            "AR over {} prompts ({} at a time) at depths 1..{}: {} rounds, {} tokens at depth {} in {:.2f} s{}",
            chain.prompts, batched ? std::min(s.batch_size, chain.prompts) : 1, s.draft_len, chain.rounds,
            chain.generated, s.draft_len, seconds,
            reuse.reused > 0 ? fmt::format(" ({} prompts prefilled once for every depth)", reuse.rows) : "");
  if (batched && target.dtype() != torch::kFloat32 && target.dtype() != torch::kFloat64) {
    static bool said = false;  // once per process: a training run evaluates many times
    if (!said)
      log::info("eval", "the target runs in {}: batched rows attend over caches as wide as the batch's longest row, "
                "which rounds differently from a prompt decoded alone, so the AR can move with eval_batch_size "
                "(docs/training.md, \"Batch size and precision\"); --target_dtype float32 makes it independent of it",
                c10::toString(target.dtype()));
    said = true;
  }
  if (s.tree.on()) {
    TreeProposer proposer(s.tree);
    GreedyVerifier verifier;
    const auto tree = decode_prompts(target, head, prompts, proposer, verifier, s.max_new_tokens, &kept);
    if (tree.rounds > 0) out.tree_ar = tree.ar;
    log::debug("eval", "tree AR ({}, {}, {}) over {} rounds", s.tree.steps, s.tree.topk, s.tree.draft_tokens,
               tree.rounds);
  }
  if (s.sampling.temperature > 0.0) {
    Uniform u(s.sampling.seed);
    auto proposer = sampled_chain_proposer(head, s.draft_len, s.sampling, u);
    SampledVerifier verifier(s.sampling, u);
    const auto sampled = decode_prompts(target, head, prompts, *proposer, verifier, s.max_new_tokens, &kept);
    if (sampled.rounds > 0) {
      out.temp_ar = sampled.ar;
      out.temp_ar_ci95 = sampled.ci95;
    }
    if (s.tree.on()) {
      Uniform tree_u(s.sampling.seed);
      TreeProposer tree_proposer(s.tree);
      SampledVerifier tree_verifier(s.sampling, tree_u);
      const auto tree = decode_prompts(target, head, prompts, tree_proposer, tree_verifier, s.max_new_tokens, &kept);
      if (tree.rounds > 0) {
        out.tree_temp_ar = tree.ar;
        out.tree_temp_ar_ci95 = tree.ci95;
      }
    }
    auto alpha = analytic_alpha(target, head, heldout, s.num_prompts, s.sampling);
    if (alpha.positions > 0) {
      out.alpha = alpha.alpha;
      out.alpha_ar = alpha.chain;
    }
  }
  return out;
}

}  // namespace eagle::acceptance
