// Acceptance at a sampling temperature (see sampled_eval.h).
#include "eagle/train/sampled_eval.h"

#include <cmath>
#include <random>

#include "eagle/head/eagle3_head.h"
#include "eagle/head/head_loss.h"
#include "eagle/train/evaluate.h"
#include "eagle/util/error.h"

namespace eagle::train {
namespace {

// A sample of probs [V] (fp64 on the host, any mass) with one uniform draw.
std::int64_t sample_from(const torch::Tensor& probs, double u) {
  auto p = probs.contiguous();
  const auto* v = p.data_ptr<double>();
  const auto n = p.numel();
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += v[i];
  double target = u * total, run = 0.0;
  std::int64_t last = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (v[i] <= 0.0) continue;
    last = i;
    run += v[i];
    if (run > target) return i;
  }
  return last;  // rounding at the top end
}

// The head's distribution over the target vocabulary [V] from its draft logits [V_d].
torch::Tensor on_target_vocab(const torch::Tensor& draft_probs, const torch::Tensor& vocab_ids, std::int64_t vocab) {
  return torch::zeros({vocab}, draft_probs.options()).index_copy_(0, vocab_ids, draft_probs);
}

}  // namespace

torch::Tensor sampling_probs(const torch::Tensor& logits, double temperature, double top_p) {
  auto probs = torch::softmax(logits.to(torch::kFloat64) / temperature, -1);
  if (top_p < 1.0) {
    auto [sorted, order] = probs.sort(-1, /*descending=*/true);
    auto before = sorted.cumsum(-1) - sorted;  // the mass of the tokens ranked above
    sorted.masked_fill_(before >= top_p, 0.0);
    probs = torch::zeros_like(probs).scatter_(-1, order, sorted);
    probs = probs / probs.sum(-1, true);
  }
  return probs;
}

RoundOutcome verify_sampled(const torch::Tensor& p, const torch::Tensor& q, const std::vector<std::int64_t>& drafted,
                            const std::function<double()>& u) {
  RoundOutcome out;
  const auto k = static_cast<std::int64_t>(drafted.size());
  for (; out.accepted < k; ++out.accepted) {
    const auto j = out.accepted;
    const auto x = drafted[static_cast<std::size_t>(j)];
    const double px = p[j][x].item<double>(), qx = q[j][x].item<double>();
    if (u() < std::min(1.0, qx > 0.0 ? px / qx : 1.0)) continue;
    auto residual = (p[j] - q[j]).clamp_min(0.0);
    // Rejection needs p(x) < q(x), so the residual has mass; rounding aside (then p itself).
    out.next = sample_from(residual.sum().item<double>() > 0.0 ? residual : p[j], u());
    return out;
  }
  out.next = sample_from(p[k], u());
  return out;
}

SampledResult sampled_acceptance_rate(const target::TargetModel& target, head::DraftHead& head,
                                      const data::Dataset& heldout, std::int64_t num_prompts,
                                      std::int64_t max_new_tokens, std::int64_t draft_len, const SamplingSettings& s) {
  torch::NoGradGuard no_grad;
  SampledResult r;
  std::mt19937_64 rng(s.seed);
  const std::function<double()> uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  const auto device = target.device();
  const auto vocab_ids = head.draft_vocab_ids().to(torch::kCPU, torch::kInt64);
  const auto vocab = target.config().vocab_size;
  std::vector<double> lengths;
  for (const auto& prompt : eval_prompts(heldout, num_prompts)) {
    ++r.prompts;
    const auto n = static_cast<std::int64_t>(prompt.size());
    const std::int64_t capacity = n + max_new_tokens + draft_len + 2;
    auto tcache = target.new_cache(1, capacity);
    auto hcache = head.new_cache(1, capacity);
    const auto start = prefill_prompt(target, tcache, prompt);
    std::int64_t x = sample_from(sampling_probs(start.last_logits, s.temperature, s.top_p).cpu(), uniform());
    auto features = start.aux_hidden;
    auto next_ids = start.next_ids(x);
    std::int64_t generated = 1;
    while (generated < max_new_tokens && !is_eos(target.config(), x)) {
      auto step = head.draft_extend(hcache, features, next_ids);
      const auto prefix = hcache.length;
      std::vector<std::int64_t> drafted;
      std::vector<torch::Tensor> qs;
      for (std::int64_t j = 0; j < draft_len; ++j) {
        auto logits = step.logits.view({-1});
        auto q = sampling_probs(logits, s.temperature, s.top_p).cpu();
        const auto d = s.sampled_drafts ? sample_from(q, uniform()) : logits.argmax().item<std::int64_t>();
        if (!s.sampled_drafts) q = torch::zeros_like(q).index_fill_(0, torch::tensor({d}), 1.0);
        const auto token = vocab_ids[d].item<std::int64_t>();
        drafted.push_back(token);
        qs.push_back(on_target_vocab(q, vocab_ids, vocab));
        if (j + 1 == draft_len) break;
        // The chain's next node: slot and RoPE position prefix + j, attending all before it.
        step = head.draft_nodes(hcache, step.state, torch::full({1, 1}, token, torch::kInt64),
                                torch::full({1, 1}, prefix + j, torch::kInt64), prefix + j,
                                torch::ones({1, prefix + j + 1}, torch::kBool));
      }
      std::vector<std::int64_t> verify{x};
      verify.insert(verify.end(), drafted.begin(), drafted.end());
      const auto before = tcache.length;
      auto vout = target.forward_cached(tcache, torch::tensor(verify).view({1, -1}).to(device));
      auto p = sampling_probs(vout.logits[0], s.temperature, s.top_p).cpu();
      auto outcome = verify_sampled(p, torch::stack(qs), drafted, uniform);
      const auto acc = outcome.accepted;
      ++r.rounds;
      lengths.push_back(static_cast<double>(1 + acc));
      target.truncate(tcache, before + 1 + acc);
      features = vout.aux_hidden.narrow(1, 0, 1 + acc);
      std::vector<std::int64_t> accepted(drafted.begin(), drafted.begin() + acc);
      accepted.push_back(outcome.next);
      next_ids = torch::tensor(accepted).view({1, -1}).to(device);
      x = outcome.next;
      if (count_new_tokens(target.config(), accepted, max_new_tokens, generated)) break;
    }
    r.generated += generated;
  }
  if (!lengths.empty()) {
    double sum = 0.0, sq = 0.0;
    for (double l : lengths) sum += l;
    r.ar = sum / static_cast<double>(lengths.size());
    for (double l : lengths) sq += (l - r.ar) * (l - r.ar);
    const auto m = static_cast<double>(lengths.size());
    r.ci95 = lengths.size() > 1 ? 1.96 * std::sqrt(sq / (m - 1.0)) / std::sqrt(m) : 0.0;
  }
  return r;
}

torch::Tensor acceptance_overlap(const torch::Tensor& p, const torch::Tensor& draft_logits,
                                 const torch::Tensor& vocab_ids, const SamplingSettings& s) {
  const auto ids = vocab_ids.to(p.device(), torch::kInt64);
  if (!s.sampled_drafts) return p.gather(1, ids.index({draft_logits.argmax(-1)}).unsqueeze(1)).squeeze(1);
  auto q = sampling_probs(draft_logits, s.temperature, s.top_p);  // [rows, V_d]: zero outside the draft ids
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
  auto* eagle3 = dynamic_cast<head::Eagle3Head*>(&head);
  if (eagle3 == nullptr) head.draft_vocab_ids();  // Error(usage): not an EAGLE-3 head
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
    auto logits = eagle3->ttt_logits(in);
    auto p_all = sampling_probs(out.logits[0], s.temperature, s.top_p);  // [len, V]: position t predicts t + 1
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

}  // namespace eagle::train
