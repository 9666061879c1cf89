// The analytic acceptance alpha_k (see alpha.h).
#include "eagle/acceptance/alpha.h"

#include "eagle/acceptance/decode.h"
#include "eagle/head/loss.h"
#include "eagle/model/sampling.h"

namespace eagle::acceptance {

torch::Tensor acceptance_overlap(const torch::Tensor& p, const torch::Tensor& draft_logits,
                                 const torch::Tensor& vocab_ids, const SamplingSettings& s) {
  const auto ids = vocab_ids.to(p.device(), torch::kInt64);
  if (!s.sampled_drafts) return p.gather(1, ids.index({draft_logits.argmax(-1)}).unsqueeze(1)).squeeze(1);
  auto q = model::sampling_probs(draft_logits, s.temperature, s.top_p);  // [rows, V_d]: zero outside the draft ids
  return torch::minimum(p.index_select(1, ids), q).sum(-1);
}

double alpha_chain(const std::vector<double>& alpha) {
  double total = 1.0, run = 1.0;
  for (double a : alpha) total += (run *= a);
  return total;
}

AlphaResult analytic_alpha(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                           std::int64_t num_prompts, const SamplingSettings& s) {
  torch::NoGradGuard no_grad;
  const auto steps = head.config().steps();
  const auto device = target.device();
  const auto vocab_ids = head.draft_vocab_ids().to(device, torch::kInt64);
  std::vector<double> sums(static_cast<std::size_t>(steps), 0.0);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(steps), 0);
  std::int64_t used = 0;
  for (std::size_t i = 0; i < heldout.size() && used < num_prompts; ++i) {
    if (!eval_prompt(heldout, i)) continue;
    ++used;
    const auto len = heldout.length(i);
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(len));
    std::vector<std::uint8_t> trained(static_cast<std::size_t>(len));
    for (std::int64_t t = 0; t < len; ++t) {
      tokens[static_cast<std::size_t>(t)] = heldout.token(i, t);
      trained[static_cast<std::size_t>(t)] = heldout.trained(i, t) ? 1 : 0;
    }
    auto ids = torch::tensor(tokens).view({1, len}).to(device);
    auto cache = target.new_cache(1, len);
    auto out = target.forward_cached(cache, ids);
    head::HeadInputs in;
    in.input_ids = ids;
    in.loss_mask = torch::tensor(trained).view({1, len}).to(device);
    in.position_ids = torch::arange(len, ids.options()).view({1, len});
    in.document_ids = torch::zeros({1, len}, ids.options());
    in.aux_hidden = out.aux_hidden;
    auto logits = head.ttt_logits(in);
    auto p_all = model::sampling_probs(out.logits[0], s.temperature, s.top_p);  // [len, V]: position t predicts t + 1
    for (std::int64_t k = 0; k < steps; ++k) {
      auto valid = head::in_document_mask(in.loss_mask, in.document_ids, k)[0];
      // Step k at t against the target at t + 1 + k (shifted; the tail is never valid).
      const auto rows = len - 1 - k;
      if (rows <= 0) continue;
      auto p = p_all.narrow(0, 1 + k, rows);
      auto draft = logits[static_cast<std::size_t>(k)][0].narrow(0, 0, rows);
      auto overlap = acceptance_overlap(p, draft, vocab_ids, s);
      auto v = valid.narrow(0, 0, rows);
      sums[static_cast<std::size_t>(k)] += overlap.masked_select(v).sum().item<double>();
      counts[static_cast<std::size_t>(k)] += v.sum().item<std::int64_t>();
    }
  }
  AlphaResult r;
  for (std::int64_t k = 0; k < steps; ++k) {
    const auto c = counts[static_cast<std::size_t>(k)];
    r.alpha.push_back(c > 0 ? sums[static_cast<std::size_t>(k)] / static_cast<double>(c) : 0.0);
  }
  r.positions = counts.empty() ? 0 : counts[0];
  r.chain = alpha_chain(r.alpha);
  return r;
}

}  // namespace eagle::acceptance
