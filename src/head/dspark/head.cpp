// The DSpark block draft: DFlash's backbone in the anchor-as-first layout, the Markov and confidence heads
// (see head/dspark/head.h).
#include "eagle/head/dspark/head.h"

#include <cmath>

#include <fmt/format.h>

#include "eagle/head/dflash/attention.h"
#include "eagle/head/loss.h"
#include "eagle/util/error.h"

namespace eagle::head {

MarkovHeadImpl::MarkovHeadImpl(std::int64_t vocab_size, std::int64_t draft_vocab_size, std::int64_t rank) {
  markov_w1 = register_module("markov_w1", torch::nn::Embedding(vocab_size, rank));
  markov_w2 =
      register_module("markov_w2", torch::nn::Linear(torch::nn::LinearOptions(rank, draft_vocab_size).bias(false)));
  torch::NoGradGuard ng;
  markov_w1->weight.normal_(0.0, 0.01);  // speculators' init (W2: nn.Linear's default)
}

torch::Tensor MarkovHeadImpl::embed(const torch::Tensor& prev) const {
  return torch::embedding(markov_w1->weight, prev.to(markov_w1->weight.device(), torch::kInt64));
}

ConfidenceHeadImpl::ConfidenceHeadImpl(std::int64_t input_dim) {
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(input_dim, 1).bias(true)));
}

DSparkSettings DSparkSettings::of(const HeadConfig& cfg) {
  DSparkSettings s;
  s.markov_rank = cfg.dspark_markov_rank;
  s.confidence_head = cfg.dspark_confidence_head;
  s.confidence_alpha = cfg.dspark_confidence_alpha;
  s.decay_gamma = cfg.dflash_decay_gamma;
  s.sample_from_anchor = cfg.dspark_sample_from_anchor;
  return s;
}

DSparkHead::DSparkHead(HeadConfig cfg) : DFlashHead(std::move(cfg)) {
  const auto& c = config();
  EAGLE_CHECK(c.dspark() && c.dflash_decay_gamma > 0,
              Error(ErrorKind::internal, "not a DSpark head config")
                  .expected("dspark_markov_rank >= 1, dflash_decay_gamma > 0")
                  .found(fmt::format("rank {}, gamma {}", c.dspark_markov_rank, c.dflash_decay_gamma)));
  markov_head = register_module("markov_head", MarkovHead(c.vocab_size, c.draft_vocab_size, c.dspark_markov_rank));
  if (c.dspark_confidence_head)
    confidence_head = register_module("confidence_head", ConfidenceHead(c.hidden_size + c.dspark_markov_rank));
}

HeadStepOutput DSparkHead::train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) {
  const auto& c = config();
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), v = c.vocab_size;
  const auto off = offset(), steps = c.steps();
  const auto anchors = step_anchors(in, denominators, steps, /*teacher=*/true, "DSpark");
  const auto dev = fc->weight.device();
  const auto n = anchors.size(1);
  // speculators' denominator: the trained slots of the step, unweighted (host doubles times device values).
  auto total = denominators.to(dev, torch::kFloat32).sum();
  total = torch::where(total > 0, total, torch::ones_like(total));
  auto hidden = block_hidden(in, anchors);  // [B, N, S, H]
  // Drafting slot j (block slot j + off) has the label x[p + j + 1]: DFlash's valid slots of a span of steps + 1.
  auto valid = dflash_slot_valid(in.loss_mask.to(dev), in.document_ids.to(dev), anchors, steps + 1);  // [B, N, K]
  auto ids = in.input_ids.to(dev);
  auto argmax = in.target_argmax.to(dev);
  const auto teacher_logits = in.teacher_logits.to(dev, torch::kFloat32);
  auto loss = torch::zeros({}, total.options());
  auto confidence_loss = torch::zeros({}, total.options());
  std::vector<torch::Tensor> rows;
  auto prefix_ok = torch::ones({b, n}, anchors.options().dtype(torch::kBool));
  for (std::int64_t j = 0; j < steps; ++j) {
    const double w = std::exp(-static_cast<double>(j) / c.dflash_decay_gamma);
    auto before = (anchors + j).clamp_max(len - 1);  // [B, N]: the label's position - 1 (teacher, prev)
    auto t = slot_terms(hidden.select(2, j + off), ids.gather(1, before),
                        teacher_logits.gather(1, before.unsqueeze(-1).expand({b, n, v})));
    auto valid_j = valid.select(2, j);
    auto m = valid_j.to(torch::kFloat32);
    loss = loss + (t.kl * m).sum() * w / total;
    if (confidence_head) {
      auto bce = torch::binary_cross_entropy_with_logits(t.confidence.to(torch::kFloat32), t.accept, {}, {},
                                                         at::Reduction::None);
      confidence_loss = confidence_loss + (bce * m).sum() * w / total;
    }
    auto correct = t.z.argmax(-1) == argmax.gather(1, before);  // the full vocabulary: ids are target ids
    rows.push_back(metric_row(valid_j, correct, prefix_ok, t.kl.detach()));
    prefix_ok = prefix_ok & valid_j & correct;
  }
  return {loss + c.dspark_confidence_alpha * confidence_loss, torch::stack(rows).detach()};
}

torch::Tensor DSparkHead::parallel_logits(DraftCache&, const torch::Tensor&, const torch::Tensor&, std::int64_t) {
  throw Error(ErrorKind::internal, "a DSpark draft's logits depend on the tokens drafted before them")
      .hint("draft through parallel_chain");
}

void DSparkHead::parallel_chain(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len, const PickToken& pick) {
  auto hidden = round_hidden(cache, features, next_ids, draft_len);
  torch::NoGradGuard ng;
  chain(hidden.narrow(1, offset(), draft_len), next_ids.to(hidden.device()).select(1, next_ids.size(1) - 1), pick);
}

std::vector<torch::Tensor> DSparkHead::ttt_logits(const HeadInputs& in) {
  torch::NoGradGuard ng;
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), off = offset();
  const auto dev = fc->weight.device();
  auto ids = in.input_ids.to(dev, torch::kInt64);
  // The block anchored at t + 1 (the last position's block reads no later token: it is never scored).
  auto anchors = torch::arange(1, len + 1, ids.options()).clamp_max(len - 1).unsqueeze(0).expand({b, len});
  auto hidden = block_hidden(in, anchors.contiguous());  // [B, T, S, H]
  std::vector<torch::Tensor> out;
  for (std::int64_t j = 0; j < config().steps(); ++j) {
    auto prev = ids.gather(1, (anchors + j).clamp_max(len - 1));  // x[t + 1 + j]
    out.push_back(markov_logits(hidden.select(2, j + off), markov_head->embed(prev)));
  }
  return out;
}

DSparkStep DSparkHead::speculators_step(const HeadInputs& in, const torch::Tensor& anchors,
                                        const torch::Tensor& valid) {
  const auto& c = config();
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), s = c.dflash_block_size, v = c.vocab_size;
  const auto dev = fc->weight.device();
  const auto a = anchors.to(dev, torch::kInt64);
  const auto n = a.size(1);
  auto hidden = block_hidden(in, a);  // [B, N, S, H]
  const auto off = offset();
  // Slot k sits at p + k: its mask is read there; anchor-as-first, its teacher and previous token too; fill-in,
  // at p + k - 1 (speculators' (index - 1) mod T; its slot 0, masked out, takes x[p] as the previous token).
  auto at = (a.unsqueeze(-1) + torch::arange(s, a.options()).view({1, 1, s})).clamp_max(len - 1).view({b, n * s});
  auto before = off == 0 ? at : (at - 1).remainder(len);
  auto prev_at = off == 0 ? at : torch::maximum(at - 1, a.repeat_interleave(s, 1));
  auto prev = in.input_ids.to(dev).gather(1, prev_at).view({b, n, s});
  auto teacher = in.teacher_logits.to(dev, torch::kFloat32)
                     .gather(1, before.unsqueeze(-1).expand({b, n * s, v}))
                     .view({b, n, s, v});
  auto mask = (in.loss_mask.to(dev).gather(1, at).view({b, n, s}) != 0) & valid.to(dev).unsqueeze(-1);
  if (off == 1) mask.select(2, 0).fill_(false);
  auto m = mask.to(torch::kFloat32);
  auto t = slot_terms(hidden, prev, teacher);
  std::vector<double> w;
  for (std::int64_t k = 0; k < s; ++k)
    w.push_back(k < off ? 0.0 : std::exp(-static_cast<double>(k - off) / config().dflash_decay_gamma));
  auto weights = torch::tensor(w, m.options()).view({1, 1, s});
  auto per_row = [&](const torch::Tensor& elementwise, double eps) {
    auto num = (elementwise * m * weights).view({b, -1}).sum(1);
    return (num / (m.view({b, -1}).sum(1) + eps)).mean();
  };
  DSparkStep out;
  out.kl_loss = per_row(t.kl, 1e-5);
  out.logits = t.z;
  out.mask = m;
  out.accept_rate = t.accept;
  out.loss = out.kl_loss;
  if (confidence_head) {
    out.confidence_logits = t.confidence;
    auto bce = torch::binary_cross_entropy_with_logits(out.confidence_logits.to(torch::kFloat32), out.accept_rate, {},
                                                       {}, at::Reduction::None);
    out.confidence_loss = per_row(bce, 1e-8);
    out.loss = out.loss + config().dspark_confidence_alpha * out.confidence_loss;
  }
  return out;
}

DSparkHead::SlotTerms DSparkHead::slot_terms(const torch::Tensor& h, const torch::Tensor& prev,
                                             const torch::Tensor& teacher) {
  SlotTerms t;
  t.e = markov_head->embed(prev);
  t.z = markov_logits(h, t.e);
  auto p = torch::softmax(teacher, -1);
  t.kl = torch::kl_div(torch::log_softmax(t.z, -1), p, at::Reduction::None, false).sum(-1);
  {
    torch::NoGradGuard ng;
    t.accept = torch::minimum(torch::softmax(t.z, -1), p).sum(-1);
  }
  if (confidence_head) t.confidence = confidence_head->forward(torch::cat({h, t.e.to(h.scalar_type())}, -1));
  return t;
}

void DSparkHead::chain(const torch::Tensor& hidden, const torch::Tensor& anchor_ids, const PickToken& pick) const {
  torch::NoGradGuard ng;
  auto prev = anchor_ids.to(hidden.device(), torch::kInt64);
  for (std::int64_t i = 0; i < hidden.size(1); ++i)
    prev = pick(i, markov_logits(hidden.select(1, i), markov_head->embed(prev))).to(hidden.device(), torch::kInt64);
}

torch::Tensor DSparkHead::greedy_chain(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) const {
  std::vector<torch::Tensor> tokens;
  chain(hidden, anchor_ids, [&](std::int64_t, const torch::Tensor& z) {
    tokens.push_back(z.argmax(-1));  // the full vocabulary: draft ids are target ids
    return tokens.back();
  });
  return torch::stack(tokens, 1).view({hidden.size(0), hidden.size(1)});
}

}  // namespace eagle::head
