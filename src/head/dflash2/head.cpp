// The DFlash2 block draft: DFlash's backbone with the block convolutions and the candidate selector (see
// head/dflash2/head.h).
#include "eagle/head/dflash2/head.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "eagle/head/dflash/attention.h"
#include "eagle/head/loss.h"
#include "eagle/util/error.h"

namespace eagle::head {

torch::Tensor grouped_block_conv(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& base,
                                 std::int64_t block, std::int64_t group_size) {
  const auto b = x.size(0), r = x.size(1), h = x.size(2), g = h / group_size, taps = base.size(0);
  const auto n = r / block;
  auto xs = x.reshape({b, n, block, g, group_size});
  auto d = delta.reshape({b, n, block, taps, g});
  auto w = base.to(x.scalar_type()).view({taps, 1, 1, 1, g, group_size});
  torch::Tensor y;
  // Tap t reads slot k - t of the same block (zero before its first slot: the reset at every block).
  for (std::int64_t t = 0; t < std::min(taps, block); ++t) {
    auto coef = w[t] + d.select(3, t).unsqueeze(-1).to(x.scalar_type());  // [B, n, block, g, gs]
    auto shifted = t == 0 ? xs : torch::cat({torch::zeros_like(xs.narrow(2, 0, t)), xs.narrow(2, 0, block - t)}, 2);
    y = t == 0 ? coef * shifted : y + coef * shifted;
  }
  return y.reshape({b, r, h});
}

BlockConvImpl::BlockConvImpl(std::int64_t hidden, std::int64_t taps_, std::int64_t group_size_)
    : taps(taps_), group_size(group_size_) {
  base_kernel = register_parameter("base_kernel", torch::zeros({2, taps, hidden}));
  kernel_projection = register_module(
      "kernel_projection",
      torch::nn::Linear(torch::nn::LinearOptions(hidden, 2 * taps * (hidden / group_size)).bias(false)));
  torch::NoGradGuard ng;
  base_kernel.select(1, 0).fill_(1.0);  // speculators' reset_convolutions: the identity
  kernel_projection->weight.zero_();
}

std::pair<torch::Tensor, torch::Tensor> BlockConvImpl::prepare(const torch::Tensor& u, std::int64_t block) const {
  const auto g = u.size(2) / group_size;
  auto kernels = torch::linear(u, kernel_projection->weight).view({u.size(0), u.size(1), 2, taps, g});
  return {grouped_block_conv(u, kernels.select(2, 0), base_kernel[0], block, group_size), kernels.select(2, 1)};
}

torch::Tensor BlockConvImpl::finish(const torch::Tensor& y, const torch::Tensor& delta, std::int64_t block) const {
  return grouped_block_conv(y, delta, base_kernel[1], block, group_size);
}

CandidateSelectorImpl::CandidateSelectorImpl(std::int64_t vocab, std::int64_t hidden, std::int64_t rank) {
  predecessor_codebook = register_parameter("predecessor_codebook", torch::empty({vocab, rank}));
  successor_codebook = register_parameter("successor_codebook", torch::empty({vocab, rank}));
  hidden_projection =
      register_module("hidden_projection", torch::nn::Linear(torch::nn::LinearOptions(hidden, rank).bias(false)));
  torch::NoGradGuard ng;
  for (auto* t : {&predecessor_codebook, &successor_codebook, &hidden_projection->weight}) t->normal_(0.0, 0.02);
}

torch::Tensor CandidateSelectorImpl::score(const torch::Tensor& unary, const torch::Tensor& h,
                                           const torch::Tensor& prev, const torch::Tensor& candidates) const {
  auto context = torch::embedding(predecessor_codebook, prev.to(torch::kInt64)) * torch::linear(h, hidden_projection->weight);
  auto successors = torch::embedding(successor_codebook, candidates.to(torch::kInt64));  // [.., K, r]
  return unary + (context.unsqueeze(-2) * successors).sum(-1).to(unary.scalar_type());
}

DFlash2Head::DFlash2Head(HeadConfig cfg) : DFlashHead(std::move(cfg)) {
  const auto& c = config();
  EAGLE_CHECK(c.dflash2() && c.dflash2_conv_group_size >= 1 && c.hidden_size % c.dflash2_conv_group_size == 0 &&
                  c.dflash2_conv_kernel_size >= 1 && c.dflash2_conv_kernel_size <= c.dflash_block_size &&
                  c.dflash2_selector_top_k >= 1 && c.dflash2_selector_top_k <= c.vocab_size,
              Error(ErrorKind::internal, "not a DFlash2 head config")
                  .expected("a selector rank, group size dividing H, taps <= block, 1 <= top_k <= V")
                  .found(fmt::format("rank {}, group {} of H {}, taps {} of block {}, top_k {} of V {}",
                                     c.dflash2_selector_rank, c.dflash2_conv_group_size, c.hidden_size,
                                     c.dflash2_conv_kernel_size, c.dflash_block_size, c.dflash2_selector_top_k,
                                     c.vocab_size)));
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    attention_convs.push_back(layer(l).register_module(
        "attention_conv", BlockConv(c.hidden_size, c.dflash2_conv_kernel_size, c.dflash2_conv_group_size)));
    mlp_convs.push_back(layer(l).register_module(
        "mlp_conv", BlockConv(c.hidden_size, c.dflash2_conv_kernel_size, c.dflash2_conv_group_size)));
  }
  candidate_selector = register_module("candidate_selector",
                                       CandidateSelector(c.vocab_size, c.hidden_size, c.dflash2_selector_rank));
}

torch::Tensor DFlash2Head::layer_forward(std::int64_t l, const torch::Tensor& h, std::int64_t block,
                                         const Attend& attend) {
  auto& lay = layer(l);
  const auto& att = *attention_convs[static_cast<std::size_t>(l)];
  const auto& mlp = *mlp_convs[static_cast<std::size_t>(l)];
  auto [u, d_att] = att.prepare(lay.input_layernorm->forward(h), block);
  auto x = h + att.finish(attention_output(*lay.self_attn, attend(u)), d_att, block);
  auto [v, d_mlp] = mlp.prepare(lay.post_attention_layernorm->forward(x), block);
  return x + mlp.finish(lay.mlp->forward(v), d_mlp, block);
}

std::pair<torch::Tensor, torch::Tensor> DFlash2Head::candidates_and_scores(const torch::Tensor& logits,
                                                                           const torch::Tensor& h,
                                                                           const torch::Tensor& prev) const {
  auto [values, ids] = logits.topk(config().dflash2_selector_top_k, -1);
  return {ids, candidate_selector->score(values, h, prev, ids)};
}

namespace {

// speculators' selector_training_candidates: the target's argmax at the last place when it is not among them.
std::pair<torch::Tensor, torch::Tensor> training_candidates(const torch::Tensor& top, const torch::Tensor& target) {
  const auto k = top.size(-1);
  auto match = top == target.unsqueeze(-1);
  auto contains = match.any(-1);
  auto position = torch::where(contains, match.to(torch::kInt64).argmax(-1), torch::full_like(target, k - 1));
  auto last = torch::where(contains, top.select(-1, k - 1), target);
  auto candidates = torch::cat({top.narrow(-1, 0, k - 1), last.unsqueeze(-1)}, -1);
  return {candidates, position};
}

}  // namespace

HeadStepOutput DFlash2Head::train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) {
  const auto& c = config();
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), s = c.dflash_block_size, v = c.vocab_size;
  const auto anchors = step_anchors(in, denominators, s - 1, /*teacher=*/true, "DFlash2");
  const auto dev = fc->weight.device();
  const auto n = anchors.size(1);
  auto total = denominators.to(dev, torch::kFloat32).sum();
  total = torch::where(total > 0, total, torch::ones_like(total));
  auto hidden = block_hidden(in, anchors);  // [B, N, S, H]
  auto valid = dflash_slot_valid(in.loss_mask.to(dev), in.document_ids.to(dev), anchors, s);  // [B, N, S - 1]
  auto ids = in.input_ids.to(dev);
  auto argmax = in.target_argmax.to(dev);
  const auto teacher_logits = in.teacher_logits.to(dev, torch::kFloat32);
  auto unary_loss = torch::zeros({}, total.options());
  auto selector_loss = torch::zeros({}, total.options());
  std::vector<torch::Tensor> rows;
  auto prefix_ok = torch::ones({b, n}, anchors.options().dtype(torch::kBool));
  for (std::int64_t k = 1; k < s; ++k) {
    // Slot k of anchor p predicts x[p + k]: the target at p + k - 1 is its teacher and x[p + k - 1] its predecessor.
    const double w = std::exp(-static_cast<double>(k - 1) / c.dflash_decay_gamma);
    auto before = (anchors + (k - 1)).clamp_max(len - 1);
    auto h = hidden.select(2, k);
    auto z = logits(h);  // [B, N, V] fp32
    auto p = torch::softmax(teacher_logits.gather(1, before.unsqueeze(-1).expand({b, n, v})), -1);
    auto kl = torch::kl_div(torch::log_softmax(z, -1), p, at::Reduction::None, false).sum(-1);
    auto target = argmax.gather(1, before);
    auto [cands, position] = training_candidates(std::get<1>(z.topk(c.dflash2_selector_top_k, -1)), target);
    auto scores = candidate_selector->score(z.gather(-1, cands), h, ids.gather(1, before), cands);
    auto ce = torch::nn::functional::cross_entropy(
                  scores.reshape({-1, scores.size(-1)}), position.reshape({-1}),
                  torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                  .view({b, n});
    auto valid_k = valid.select(2, k - 1);
    auto m = valid_k.to(torch::kFloat32);
    unary_loss = unary_loss + (kl * m).sum() * w / total;
    selector_loss = selector_loss + (ce * m).sum() * w / total;
    // What a round drafts at this slot under teacher forcing: the selector's best candidate.
    auto pick = cands.gather(-1, scores.argmax(-1, true)).squeeze(-1);
    auto correct = pick == target;
    rows.push_back(metric_row(valid_k, correct, prefix_ok, kl.detach()));
    prefix_ok = prefix_ok & valid_k & correct;
  }
  return {unary_loss + c.dflash2_selector_alpha * selector_loss, torch::stack(rows).detach()};
}

DFlash2Step DFlash2Head::speculators_step(const HeadInputs& in, const torch::Tensor& anchors,
                                          const torch::Tensor& valid) {
  const auto& c = config();
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), s = c.dflash_block_size, v = c.vocab_size;
  const auto dev = fc->weight.device();
  const auto a = anchors.to(dev, torch::kInt64);
  const auto n = a.size(1);
  auto hidden = block_hidden(in, a);  // [B, N, S, H]
  // Slot k sits at p + k: its mask there, its teacher and predecessor at p + k - 1 (speculators' (index - 1) mod
  // T; slot 0, masked out, takes x[p] as its predecessor).
  auto at = (a.unsqueeze(-1) + torch::arange(s, a.options()).view({1, 1, s})).clamp_max(len - 1).view({b, n * s});
  auto before = (at - 1).remainder(len);
  auto prev = in.input_ids.to(dev).gather(1, torch::maximum(at - 1, a.repeat_interleave(s, 1))).view({b, n, s});
  auto teacher = in.teacher_logits.to(dev, torch::kFloat32)
                     .gather(1, before.unsqueeze(-1).expand({b, n * s, v}))
                     .view({b, n, s, v});
  auto mask = (in.loss_mask.to(dev).gather(1, at).view({b, n, s}) != 0) & valid.to(dev).unsqueeze(-1);
  mask.select(2, 0).fill_(false);
  auto m = mask.to(torch::kFloat32);
  DFlash2Step out;
  out.unary_logits = logits(hidden);
  auto p = torch::softmax(teacher, -1);
  auto kl = torch::kl_div(torch::log_softmax(out.unary_logits, -1), p, at::Reduction::None, false).sum(-1);
  auto [cands, position] =
      training_candidates(std::get<1>(out.unary_logits.topk(c.dflash2_selector_top_k, -1)), teacher.argmax(-1));
  out.candidates = cands;
  out.target_positions = position;
  out.candidate_logits = candidate_selector->score(out.unary_logits.gather(-1, cands), hidden, prev, cands);
  auto ce = torch::nn::functional::cross_entropy(
                out.candidate_logits.reshape({-1, out.candidate_logits.size(-1)}), position.reshape({-1}),
                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                .view({b, n, s});
  std::vector<double> w{0.0};
  for (std::int64_t k = 1; k < s; ++k) w.push_back(std::exp(-static_cast<double>(k - 1) / c.dflash_decay_gamma));
  auto weights = torch::tensor(w, m.options()).view({1, 1, s});
  auto per_row = [&](const torch::Tensor& elementwise) {
    return ((elementwise * m * weights).view({b, -1}).sum(1) / (m.view({b, -1}).sum(1) + 1e-5)).mean();
  };
  out.mask = m;
  out.unary_loss = per_row(kl);
  out.selector_loss = per_row(ce);
  out.loss = out.unary_loss + c.dflash2_selector_alpha * out.selector_loss;
  return out;
}

void DFlash2Head::walk(const torch::Tensor& hidden, const torch::Tensor& anchor_ids, const PickToken& pick) const {
  torch::NoGradGuard ng;
  auto prev = anchor_ids.to(hidden.device(), torch::kInt64);
  for (std::int64_t i = 0; i < hidden.size(1); ++i) {
    auto h = hidden.select(1, i);
    auto [cands, scores] = candidates_and_scores(logits(h), h, prev);
    // vLLM caches the walk's row as the draft's logits: -inf outside the candidates.
    auto z = torch::full({h.size(0), config().vocab_size}, -std::numeric_limits<float>::infinity(),
                         scores.options().dtype(torch::kFloat32))
                 .scatter_(1, cands, scores.to(torch::kFloat32));
    prev = pick(i, z).to(hidden.device(), torch::kInt64);
  }
}

torch::Tensor DFlash2Head::greedy_walk(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) const {
  std::vector<torch::Tensor> tokens;
  walk(hidden, anchor_ids, [&](std::int64_t, const torch::Tensor& z) {
    tokens.push_back(z.argmax(-1));  // the best candidate (the full vocabulary: target ids)
    return tokens.back();
  });
  return torch::stack(tokens, 1).view({hidden.size(0), hidden.size(1)});
}

void DFlash2Head::parallel_chain(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                 std::int64_t draft_len, const PickToken& pick) {
  auto hidden = round_hidden(cache, features, next_ids, draft_len);
  walk(hidden.narrow(1, 1, draft_len), next_ids.to(hidden.device()).select(1, next_ids.size(1) - 1), pick);
}

torch::Tensor DFlash2Head::parallel_logits(DraftCache&, const torch::Tensor&, const torch::Tensor&, std::int64_t) {
  throw Error(ErrorKind::internal, "a DFlash2 draft's scores depend on the token picked before them")
      .hint("draft through parallel_chain");
}

std::vector<torch::Tensor> DFlash2Head::ttt_logits(const HeadInputs& in) {
  torch::NoGradGuard ng;
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1);
  const auto dev = fc->weight.device();
  auto ids = in.input_ids.to(dev, torch::kInt64);
  auto anchors = torch::arange(1, len + 1, ids.options()).clamp_max(len - 1).unsqueeze(0).expand({b, len});
  auto hidden = block_hidden(in, anchors.contiguous());  // [B, T, S, H]
  std::vector<torch::Tensor> out;
  for (std::int64_t j = 0; j < config().steps(); ++j) {
    auto h = hidden.select(2, j + 1);
    auto [cands, scores] = candidates_and_scores(logits(h), h, ids.gather(1, (anchors + j).clamp_max(len - 1)));
    out.push_back(torch::full({b, len, config().vocab_size}, -std::numeric_limits<float>::infinity(),
                              scores.options().dtype(torch::kFloat32))
                      .scatter_(2, cands, scores.to(torch::kFloat32)));
  }
  return out;
}

}  // namespace eagle::head
