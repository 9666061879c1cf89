// The acceptance metrics of an evaluation (see measure.h).
#include "eagle/acceptance/measure.h"

#include <algorithm>
#include <chrono>

#include "eagle/acceptance/alpha.h"
#include "eagle/acceptance/batched.h"
#include "eagle/acceptance/decode.h"
#include "eagle/acceptance/propose.h"
#include "eagle/config/option_table.h"
#include "eagle/util/log.h"

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
  s.sampling = {o.eval_temperature, o.eval_top_p, o.eval_draft_sampling == config::DraftSampling::sample,
                static_cast<std::uint64_t>(o.seed)};
  return s;
}

AcceptanceStats measure(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                        const AcceptanceSettings& s) {
  torch::NoGradGuard no_grad;
  AcceptanceStats out;
  const auto prompts = eval_prompts(heldout, s.num_prompts);
  const auto start = std::chrono::steady_clock::now();
  const bool batched = s.batch_size > 1 && head.drafts_ragged();
  AcceptanceResult chain;
  if (batched) {
    chain = batched_acceptance(target, head, prompts, s.max_new_tokens, s.draft_len, s.batch_size, s.max_cuda_graphs);
  } else {
    ChainProposer proposer(s.draft_len);
    GreedyVerifier verifier;
    chain = decode_prompts(target, head, prompts, proposer, verifier, s.max_new_tokens);
  }
  if (chain.rounds > 0) out.ar = chain.ar;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("eval", "AR over {} prompts ({} at a time): {} rounds, {} tokens in {:.2f} s", chain.prompts,
            batched ? std::min(s.batch_size, chain.prompts) : 1, chain.rounds, chain.generated, seconds);
  if (s.tree.on()) {
    TreeProposer proposer(s.tree);
    GreedyVerifier verifier;
    const auto tree = decode_prompts(target, head, prompts, proposer, verifier, s.max_new_tokens);
    if (tree.rounds > 0) out.tree_ar = tree.ar;
    log::debug("eval", "tree AR ({}, {}, {}) over {} rounds", s.tree.steps, s.tree.topk, s.tree.draft_tokens,
               tree.rounds);
  }
  if (s.sampling.temperature > 0.0) {
    Uniform u(s.sampling.seed);
    auto proposer = sampled_chain_proposer(head, s.draft_len, s.sampling, u);
    SampledVerifier verifier(s.sampling, u);
    const auto sampled = decode_prompts(target, head, prompts, *proposer, verifier, s.max_new_tokens);
    if (sampled.rounds > 0) {
      out.temp_ar = sampled.ar;
      out.temp_ar_ci95 = sampled.ci95;
    }
    if (s.tree.on()) {
      Uniform tree_u(s.sampling.seed);
      TreeProposer tree_proposer(s.tree);
      SampledVerifier tree_verifier(s.sampling, tree_u);
      const auto tree = decode_prompts(target, head, prompts, tree_proposer, tree_verifier, s.max_new_tokens);
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
