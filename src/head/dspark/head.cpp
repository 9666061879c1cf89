// The DSpark block draft: DFlash's backbone in the anchor-as-first layout, the Markov and confidence heads
// (see head/dspark/head.h).
#include "eagle/head/dspark/head.h"

#include <cmath>

#include <fmt/format.h>

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

DSparkHead::DSparkHead(HeadConfig cfg, DSparkSettings settings) : DFlashHead(std::move(cfg)), settings_(settings) {
  const auto& c = config();
  EAGLE_CHECK(settings_.markov_rank >= 1 && (!settings_.confidence_with_markov || settings_.confidence_head),
              Error(ErrorKind::internal, "not a DSpark head")
                  .expected("markov_rank >= 1; confidence_head_with_markov only with the confidence head")
                  .found(fmt::format("rank {}, confidence {}, with markov {}", settings_.markov_rank,
                                     settings_.confidence_head, settings_.confidence_with_markov)));
  markov_head = register_module("markov_head", MarkovHead(c.vocab_size, c.draft_vocab_size, settings_.markov_rank));
  if (settings_.confidence_head)
    confidence_head =
        register_module("confidence_head",
                        ConfidenceHead(c.hidden_size + (settings_.confidence_with_markov ? settings_.markov_rank : 0)));
}

DSparkStep DSparkHead::speculators_step(const HeadInputs& in, const torch::Tensor& anchors,
                                        const torch::Tensor& valid) {
  const auto& c = config();
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), s = c.dflash_block_size, v = c.vocab_size;
  const auto dev = fc->weight.device();
  const auto a = anchors.to(dev, torch::kInt64);
  const auto n = a.size(1);
  auto hidden = block_hidden(in, a);  // [B, N, S, H]
  // Slot k sits at p + k: its previous token, teacher and mask are read there (speculators' indices).
  auto at = (a.unsqueeze(-1) + torch::arange(s, a.options()).view({1, 1, s})).clamp_max(len - 1).view({b, n * s});
  auto prev = in.input_ids.to(dev).gather(1, at).view({b, n, s});
  auto teacher =
      in.teacher_logits.to(dev, torch::kFloat32).gather(1, at.unsqueeze(-1).expand({b, n * s, v})).view({b, n, s, v});
  auto mask = (in.loss_mask.to(dev).gather(1, at).view({b, n, s}) != 0) & valid.to(dev).unsqueeze(-1);
  auto m = mask.to(torch::kFloat32);
  auto e = markov_head->embed(prev);  // [B, N, S, r]
  auto logits = this->logits(hidden) + markov_head->bias(e).to(torch::kFloat32);
  std::vector<double> w;
  for (std::int64_t k = 0; k < s; ++k) w.push_back(std::exp(-static_cast<double>(k) / settings_.decay_gamma));
  auto weights = torch::tensor(w, m.options()).view({1, 1, s});
  // KL(p || q) per slot (speculators' eager kl_div_loss: kl_div(log q, p) summed over the vocabulary).
  auto log_q = torch::log_softmax(logits, -1);
  auto p = torch::softmax(teacher, -1);
  auto kl = torch::kl_div(log_q, p, at::Reduction::None, false).sum(-1);  // [B, N, S]
  auto per_row = [&](const torch::Tensor& elementwise, double eps) {
    auto num = (elementwise * m * weights).view({b, -1}).sum(1);
    return (num / (m.view({b, -1}).sum(1) + eps)).mean();
  };
  DSparkStep out;
  out.kl_loss = per_row(kl, 1e-5);
  out.logits = logits;
  out.mask = m;
  {
    torch::NoGradGuard ng;
    out.accept_rate = torch::minimum(torch::softmax(logits, -1), p).sum(-1);
  }
  out.loss = out.kl_loss;
  if (confidence_head) {
    auto features = settings_.confidence_with_markov ? torch::cat({hidden, e.to(hidden.scalar_type())}, -1) : hidden;
    out.confidence_logits = confidence_head->forward(features);
    auto bce = torch::binary_cross_entropy_with_logits(out.confidence_logits.to(torch::kFloat32), out.accept_rate, {},
                                                       {}, at::Reduction::None);
    out.confidence_loss = per_row(bce, 1e-8);
    out.loss = out.loss + settings_.confidence_alpha * out.confidence_loss;
  }
  return out;
}

torch::Tensor DSparkHead::greedy_chain(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) const {
  torch::NoGradGuard ng;
  const auto r = hidden.size(0), s = hidden.size(1);
  auto base = logits(hidden);  // [R, S, V]
  auto prev = anchor_ids.to(base.device(), torch::kInt64);
  std::vector<torch::Tensor> tokens;
  for (std::int64_t i = 0; i < s; ++i) {
    auto z = base.select(1, i) + markov_head->bias(markov_head->embed(prev)).to(torch::kFloat32);
    prev = z.argmax(-1);
    tokens.push_back(prev);
  }
  return torch::stack(tokens, 1).view({r, s});
}

}  // namespace eagle::head
