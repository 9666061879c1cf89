// EAGLE-1 head: feature regression plus token loss, and incremental drafting.
#include "eagle/head/eagle/eagle1_head.h"

#include <cmath>

#include <fmt/format.h>

#include "eagle/head/loss.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::head {

Eagle1Head::Eagle1Head(HeadConfig cfg) : cfg_(std::move(cfg)) {
  fc = register_module(
      "fc", torch::nn::Linear(torch::nn::LinearOptions(2 * cfg_.hidden_size, cfg_.hidden_size).bias(cfg_.fc_bias)));
  layer = HeadLayer(cfg_, HeadLayerKind::eagle1);
  layers = register_module("layers", torch::nn::ModuleList(layer));
  inv_freq_ = model::rope_inv_freq_serving(cfg_.rope);
}

void Eagle1Head::set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) {
  for (auto [t, name] : {std::pair{&embedding, "embed_tokens.weight"}, {&lm_head, "lm_head.weight"}})
    model::check_shape(*t, {cfg_.vocab_size, cfg_.hidden_size},
                       Error(ErrorKind::input, "a target tensor does not fit the head").place(name));
  embedding_ = embedding.detach();
  lm_head_ = lm_head.detach();
  // Onto the head's device now, not lazily in the first training step: a host-to-device copy there
  // would synchronise inside a CUDA graph's warm-up.
  inv_freq_ = inv_freq_.to(fc->weight.device());
}

torch::Tensor Eagle1Head::embed(const torch::Tensor& ids) const {
  EAGLE_CHECK(embedding_.defined(),
              Error(ErrorKind::internal, "the head has no target embedding").hint("call set_target_weights first"));
  torch::NoGradGuard ng;
  return torch::embedding(embedding_, ids.to(embedding_.device())).to(fc->weight.scalar_type());
}

torch::Tensor Eagle1Head::logits(const torch::Tensor& features) const {
  // The LM head is frozen: gradients flow to the features, never into the weight.
  return torch::linear(features, lm_head_.to(features.scalar_type())).to(torch::kFloat32);
}

torch::Tensor Eagle1Head::predict_features(const HeadInputs& in) {
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const double scale = 1.0 / std::sqrt(static_cast<double>(cfg_.head_dim));
  auto f = in.final_hidden.to(fc->weight.scalar_type());
  auto x = fc->forward(torch::cat({embed(shift_left(in.input_ids, 1, 0.0)), f}, -1));
  auto qkv = project_qkv(*layer->self_attn, cfg_, x, inv_freq_, in.position_ids);
  const model::AttentionLayout layout(in.document_ids, in.attention);
  auto a = ttt_attention(cfg_.attention, qkv.q, qkv.k, qkv.v, {}, {}, layout, scale);
  return layer->finish(x, a);
}

HeadStepOutput Eagle1Head::train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) {
  auto den = denominators.to(fc->weight.device(), torch::kFloat32).clamp_min(1.0);
  auto pred = predict_features(in);
  auto next = shift_left(in.final_hidden, 1, 0.0).to(torch::kFloat32);
  auto feature_loss = torch::smooth_l1_loss(pred.to(torch::kFloat32), next, at::Reduction::None).mean(-1);
  auto draft_logits = logits(pred);
  torch::Tensor teacher;
  {
    torch::NoGradGuard ng;
    teacher = torch::softmax(logits(next), -1);
  }
  auto token_loss = soft_cross_entropy(draft_logits, teacher);
  auto pos_loss = cfg_.eagle1_feature_weight * feature_loss + cfg_.eagle1_token_weight * token_loss;
  auto target_next = shift_left(in.target_argmax, 1, 0.0);
  auto valid = in_document_mask(in.loss_mask, in.document_ids, 0);
  auto loss = torch::where(valid, pos_loss, torch::zeros_like(pos_loss)).sum() / den[0];
  auto correct = draft_logits.argmax(-1) == target_next;
  auto row = metric_row(valid, correct, torch::ones_like(valid), pos_loss);
  return {loss, row.unsqueeze(0).detach()};
}

DraftCache Eagle1Head::new_cache(std::int64_t batch, std::int64_t capacity) const {
  return make_draft_cache(cfg_, batch, capacity, fc->weight.options());
}

torch::Tensor Eagle1Head::draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) {
  torch::NoGradGuard ng;
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const auto b = features.size(0), n = features.size(1);
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  auto run = [&](const torch::Tensor& f, const torch::Tensor& ids, std::int64_t start) {
    const auto len = ids.size(1);
    auto x = fc->forward(torch::cat({embed(ids), f}, -1));
    auto positions = torch::arange(start, start + len, opts).unsqueeze(0).expand({b, len});
    auto raw = project_qkv(*layer->self_attn, cfg_, x, inv_freq_, positions);
    return layer->finish(x, cached_attention(cache, cfg_, start, raw.q, raw.k, raw.v));
  };
  const auto start = cache.length;
  auto h = run(features.to(dev, fc->weight.scalar_type()), next_ids.to(dev), start);
  cache.length = start + n;
  std::vector<torch::Tensor> drafted;
  auto last = h.narrow(1, n - 1, 1);
  for (std::int64_t j = 0; j < draft_len; ++j) {
    auto token = logits(last).argmax(-1);
    drafted.push_back(token);
    if (j + 1 == draft_len) break;
    last = run(last, token, cache.length + j);
  }
  return torch::cat(drafted, 1);
}

}  // namespace eagle::head
