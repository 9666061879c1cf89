// Drafting in explicit steps (head.h: draft_extend, draft_nodes): the EAGLE-3 head's layer over
// the verified prefix and over the nodes of a draft tree with an explicit attention mask; the
// operations of draft() in the same order, so a chain drafted this way equals draft() bit for bit.
#include <fmt/format.h>

#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/util/error.h"

namespace eagle::head {
namespace {

// P-EAGLE drafts every token of a round in one forward: there is no step to extend or tree to grow
// (a node's children would not depend on its token). Its chains, greedy or sampled, need no steps.
void check_sequential(const HeadConfig& cfg) {
  EAGLE_CHECK(!cfg.parallel_drafting,
              Error(ErrorKind::usage, "tree evaluation needs a sequentially drafting head")
                  .place("eval_tree_topk")
                  .found("a P-EAGLE head (parallel_drafting)")
                  .hint("evaluate a P-EAGLE head with chains (eval_tree_topk 0), greedy or at eval_temperature"));
}

}  // namespace

torch::Tensor Eagle3Head::parallel_logits(DraftCache& cache, const torch::Tensor& features,
                                          const torch::Tensor& next_ids, std::int64_t draft_len) {
  torch::NoGradGuard ng;
  EAGLE_CHECK(cfg_.parallel_drafting,
              Error(ErrorKind::internal, "parallel_logits needs a P-EAGLE head (parallel_drafting)"));
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  return parallel_forward(cache, features, next_ids, draft_len).to(torch::kFloat32);
}

DraftHead::Step Eagle3Head::draft_extend(DraftCache& cache, const torch::Tensor& features,
                                         const torch::Tensor& next_ids) {
  torch::NoGradGuard ng;
  check_sequential(cfg_);
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const auto n = features.size(1), start = cache.length;
  auto h = cached_layers(cache, combine(features.to(dev)), next_ids.to(dev), start, start);
  cache.length = start + n;
  auto last = h.narrow(1, n - 1, 1);  // as draft(): the LM head over the last position alone
  return {next_state(last), lm_head->forward(norm->forward(last)).to(torch::kFloat32)};
}

DraftHead::Step Eagle3Head::draft_nodes(DraftCache& cache, const torch::Tensor& states, const torch::Tensor& ids,
                                        const torch::Tensor& positions, std::int64_t slot, const torch::Tensor& mask) {
  torch::NoGradGuard ng;
  check_sequential(cfg_);
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const auto hidden = states.to(dev);
  const auto emb = embed(ids.to(dev));
  const auto pos = positions.to(dev);
  auto h = hidden;  // the state enters the residual stream at layer 0 only, as in cached_layers
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto raw = project_qkv(*layer(l).self_attn, cfg_, layer_input(l, emb, hidden, h), inv_freq_, pos);
    h = layer(l).finish(h, masked_cached_attention(cache, cfg_, slot, raw.q, raw.k, raw.v, mask, l));
  }
  return {next_state(h), lm_head->forward(norm->forward(h)).to(torch::kFloat32)};
}

}  // namespace eagle::head
