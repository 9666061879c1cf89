// The DFlash block draft (see dflash_head.h): its config from the target, the training forward over
// anchored blocks, the slot losses and metrics, and vLLM's one-forward drafting round (one row, or
// ragged rows at once for the batched evaluation).
#include "eagle/head/dflash/head.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/dflash/attention.h"
#include "eagle/head/draft_vocab.h"
#include "eagle/head/fused_loss.h"
#include "eagle/head/loss.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::head {
namespace {

// A hard label as teacher logits: softmax in fp32 makes it exactly one-hot (exp(-1e4) is 0).
constexpr double kHardLabelLogit = 1e4;

}  // namespace

std::vector<std::int64_t> dflash_default_target_layer_ids(std::int64_t target_layers, std::int64_t draft_layers) {
  std::set<std::int64_t> ids;
  if (draft_layers <= 1) {
    ids.insert(target_layers / 2);
  } else {
    for (std::int64_t i = 0; i < draft_layers; ++i) {
      const double x = 1.0 + static_cast<double>(i) * static_cast<double>(target_layers - 4) /
                                 static_cast<double>(draft_layers - 1);
      ids.insert(std::clamp<std::int64_t>(static_cast<std::int64_t>(std::nearbyint(x)), 0, target_layers - 1));
    }
  }
  return {ids.begin(), ids.end()};
}

HeadConfig dflash_config_from_target(const target::TargetConfig& target, const DFlashSettings& s) {
  const auto l = target.num_hidden_layers;
  const auto ids = dflash_sorted_layer_ids(s.target_layer_ids.empty() ? dflash_default_target_layer_ids(l, s.num_layers)
                                                                      : s.target_layer_ids);
  for (auto t : ids)
    EAGLE_CHECK(t >= 0 && t < l, Error(ErrorKind::usage, "a DFlash target layer is outside the target")
                                     .place("dflash_target_layers")
                                     .expected(fmt::format("layer ids in [0, {})", l))
                                     .found(fmt::format("{}", fmt::join(ids, ","))));
  EAGLE_CHECK(s.block_size >= 2, Error(ErrorKind::usage, "a DFlash block needs the anchor and a mask slot")
                                     .place("dflash_block_size")
                                     .expected(">= 2")
                                     .found(std::to_string(s.block_size)));
  EAGLE_CHECK(s.mask_token_id >= 0 && s.mask_token_id < target.vocab_size,
              Error(ErrorKind::usage, "DFlash needs a mask token inside the target's vocabulary")
                  .place("mask_token_id")
                  .expected(fmt::format("an id in [0, {})", target.vocab_size))
                  .found(std::to_string(s.mask_token_id)));
  EAGLE_CHECK(s.num_layers >= 1 && s.num_anchors >= 1,
              Error(ErrorKind::usage, "DFlash needs at least one layer and one anchor")
                  .place("draft_num_layers, dflash_num_anchors")
                  .found(fmt::format("{}, {}", s.num_layers, s.num_anchors)));
  std::vector<std::int64_t> aux;
  for (auto t : ids) aux.push_back(t + 1);  // hidden_states[t + 1]: layer t's un-normed output
  auto c = HeadConfig::from_target(target, 3, aux, target.vocab_size);
  c.draft_vocab_size = target.vocab_size;
  c.qk_norm = true;
  c.attention_bias = false;
  c.num_layers = s.num_layers;
  c.mask_token_id = s.mask_token_id;
  c.dflash_block_size = s.block_size;
  c.ttt_steps = s.block_size - 1;  // K: the drafted tokens (steps() says the same)
  c.dflash_num_anchors = s.num_anchors;
  c.dflash_decay_gamma = s.decay_gamma;
  c.dflash_hard_labels = s.hard_labels;
  return c;
}

std::vector<std::int64_t> dflash_sorted_layer_ids(std::vector<std::int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<std::int64_t> dflash_target_layer_ids(const HeadConfig& cfg) {
  std::vector<std::int64_t> ids;
  for (auto a : cfg.aux_layer_ids) ids.push_back(a - 1);
  return ids;
}

DFlashHead::DFlashHead(HeadConfig cfg) : cfg_(std::move(cfg)) {
  EAGLE_CHECK(cfg_.dflash() && cfg_.dflash_block_size >= 2 && cfg_.qk_norm && cfg_.num_layers >= 1 &&
                  cfg_.draft_vocab_size == cfg_.vocab_size && !cfg_.aux_layer_ids.empty() &&
                  cfg_.mask_token_id >= 0 && cfg_.mask_token_id < cfg_.vocab_size,
              Error(ErrorKind::internal, "not a DFlash head config")
                  .expected("dflash_block_size >= 2, qk_norm, layers >= 1, the full vocabulary, aux layers, a mask id")
                  .found(fmt::format("block {}, qk_norm {}, {} layers, {} of {} ids, {} aux layers, mask {}",
                                     cfg_.dflash_block_size, cfg_.qk_norm, cfg_.num_layers, cfg_.draft_vocab_size,
                                     cfg_.vocab_size, cfg_.aux_layer_ids.size(), cfg_.mask_token_id)));
  const auto n_aux = static_cast<std::int64_t>(cfg_.aux_layer_ids.size());
  fc = register_module(
      "fc", torch::nn::Linear(torch::nn::LinearOptions(n_aux * cfg_.target_hidden_size, cfg_.hidden_size).bias(false)));
  hidden_norm = register_module("hidden_norm", RmsNorm(cfg_.hidden_size, cfg_.rms_norm_eps));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) layers->push_back(HeadLayer(cfg_, HeadLayerKind::decoder));
  norm = register_module("norm", RmsNorm(cfg_.hidden_size, cfg_.rms_norm_eps));
  draft_ids = register_buffer("draft_ids", DraftVocab::identity(cfg_.vocab_size).ids());
  inv_freq_ = model::rope_inv_freq_serving(cfg_.rope);
}

HeadLayerImpl& DFlashHead::layer(std::int64_t l) { return *layers[static_cast<std::size_t>(l)]->as<HeadLayerImpl>(); }

torch::Tensor DFlashHead::layer_forward(std::int64_t l, const torch::Tensor& h, std::int64_t, const Attend& attend) {
  auto& lay = layer(l);
  return lay.finish(h, attend(lay.input_layernorm->forward(h)));
}

void DFlashHead::to_device_of_weights() {
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
}

void DFlashHead::set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) {
  for (auto [t, name] : {std::pair{&embedding, "embed_tokens.weight"}, {&lm_head, "lm_head.weight"}})
    model::check_shape(*t, {cfg_.vocab_size, cfg_.hidden_size},
                       Error(ErrorKind::input, "target tensor does not fit the DFlash head").place(name));
  embedding_ = embedding.detach();
  lm_head_ = lm_head.detach();
  to_device_of_weights();  // now, not in the first (possibly captured) training step
}

torch::Tensor DFlashHead::embed(const torch::Tensor& ids) const {
  EAGLE_CHECK(embedding_.defined(),
              Error(ErrorKind::internal, "the head has no target embedding").hint("call set_target_weights first"));
  torch::NoGradGuard ng;
  return torch::embedding(embedding_, ids.to(embedding_.device())).to(fc->weight.device(), fc->weight.scalar_type());
}

torch::Tensor DFlashHead::logits(const torch::Tensor& o) const {
  return torch::linear(o.to(lm_head_.scalar_type()), lm_head_).to(torch::kFloat32);
}

torch::Tensor DFlashHead::context(const torch::Tensor& aux) {
  return hidden_norm->forward(fc->forward(aux.to(fc->weight.device(), fc->weight.scalar_type())));
}

std::pair<torch::Tensor, torch::Tensor> DFlashHead::context_kv(std::int64_t l, const torch::Tensor& u,
                                                               const torch::Tensor& positions) {
  // vLLM's precompute_and_store_context_kv: the K/V rows of the layer's qkv projection on u, k_norm
  // per head, RoPE at the context positions; no input_layernorm, no query.
  const auto& attn = *layer(l).self_attn;
  const auto b = u.size(0), n = u.size(1), kvh = cfg_.num_key_value_heads, d = cfg_.head_dim;
  auto k = torch::linear(u, attn.k_proj->weight, attn.k_proj->bias).view({b, n, kvh, d}).transpose(1, 2);
  auto v = torch::linear(u, attn.v_proj->weight, attn.v_proj->bias).view({b, n, kvh, d}).transpose(1, 2);
  k = attn.k_norm->forward(k);
  auto [cos, sin] = model::rope_cos_sin(inv_freq_, positions, k.scalar_type(), model::rope_attention_factor(cfg_.rope));
  return {model::apply_rope(k, cos, sin), v};
}

torch::Tensor DFlashHead::block_hidden(const HeadInputs& in, const torch::Tensor& anchors, bool dense) {
  to_device_of_weights();
  const auto b = in.input_ids.size(0), n = anchors.size(1), s = cfg_.dflash_block_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(cfg_.head_dim));
  auto u = context(in.aux_hidden);
  // Block j: [x_{a_j}, M x (S - 1)] at positions pos(a_j) .. pos(a_j) + S - 1.
  auto ids = torch::full({b, n, s}, cfg_.mask_token_id, anchors.options());
  ids.select(2, 0).copy_(in.input_ids.gather(1, anchors));
  auto slots = torch::arange(s, anchors.options()).view({1, 1, s});
  auto positions = (in.position_ids.gather(1, anchors).unsqueeze(-1) + slots).view({b, n * s});
  auto h = embed(ids.view({b, n * s}));
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto& lay = layer(l);
    auto [ck, cv] = context_kv(l, u, in.position_ids);
    h = layer_forward(l, h, s, [&](const torch::Tensor& x) {
      auto qkv = project_qkv(*lay.self_attn, cfg_, x, inv_freq_, positions);
      return dense ? dflash_attention_dense(qkv.q, ck, cv, qkv.k, qkv.v, anchors, in.document_ids, scale)
                   : dflash_attention(qkv.q, ck, cv, qkv.k, qkv.v, anchors, in.document_ids, scale);
    });
  }
  return norm->forward(h).view({b, n, s, cfg_.hidden_size});
}

torch::Tensor DFlashHead::step_anchors(const HeadInputs& in, const torch::Tensor& denominators, std::int64_t slots,
                                       bool teacher, const char* noun) const {
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1);
  check_row_inputs(in);
  check_head_input(in.aux_hidden, "aux_hidden", {b, len, fc->weight.size(1)});
  if (teacher) check_head_input(in.teacher_logits, "teacher_logits", {b, len, cfg_.vocab_size});
  EAGLE_CHECK(in.extra.defined() && in.extra.dim() == 2 && in.extra.size(0) == b,
              Error(ErrorKind::internal, fmt::format("a {} step needs its anchors", noun))
                  .place("HeadInputs.extra")
                  .expected(fmt::format("[{}, N] int64 (dflash_sample_anchors)", b))
                  .found(in.extra.defined() ? c10::str(in.extra.sizes()) : "undefined"));
  EAGLE_CHECK(denominators.numel() == slots, Error(ErrorKind::internal, "loss denominators do not match the block")
                                                 .place("denominators")
                                                 .expected(fmt::format("{} values", slots))
                                                 .found(fmt::format("{}", denominators.numel())));
  return in.extra.to(fc->weight.device(), torch::kInt64);
}

HeadStepOutput DFlashHead::train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) {
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1), s = cfg_.dflash_block_size;
  const auto anchors = step_anchors(in, denominators, s - 1, !cfg_.dflash_hard_labels, "DFlash");
  const auto dev = fc->weight.device();
  const auto n = anchors.size(1);
  // Slot weights w_k = exp(-(k - 1) / gamma) and the step's sum_k w_k n_k (0 only when nothing counts).
  std::vector<double> w;
  for (std::int64_t k = 1; k < s; ++k)
    w.push_back(cfg_.dflash_decay_gamma > 0 ? std::exp(-static_cast<double>(k - 1) / cfg_.dflash_decay_gamma) : 1.0);
  // Host doubles times device values only: nothing is copied to the device (graph-capture safe).
  auto den = denominators.to(dev, torch::kFloat32);
  auto total = torch::zeros({}, den.options());
  for (std::int64_t k = 1; k < s; ++k) total = total + den[k - 1] * w[static_cast<std::size_t>(k - 1)];
  total = torch::where(total > 0, total, torch::ones_like(total));
  auto out = block_hidden(in, anchors);
  auto valid = dflash_slot_valid(in.loss_mask.to(dev), in.document_ids.to(dev), anchors, s);  // [B, N, K]
  const auto weight = cfg_.loss_chunk_size == 0 ? lm_head_.to(fc->weight.scalar_type()) : lm_head_;
  auto loss = torch::zeros({}, total.options());
  std::vector<torch::Tensor> rows;
  auto prefix_ok = torch::ones({b, n}, anchors.options().dtype(torch::kBool));
  for (std::int64_t k = 1; k < s; ++k) {
    // Slot k of anchor a predicts x_{a+k}; its teacher is the target's distribution at a + k - 1.
    auto before = (anchors + (k - 1)).clamp_max(len - 1);
    torch::Tensor teacher;
    if (cfg_.dflash_hard_labels) {
      auto label = in.input_ids.to(dev).gather(1, (anchors + k).clamp_max(len - 1));
      teacher = torch::zeros({b, n, cfg_.vocab_size}, total.options()).scatter_(2, label.unsqueeze(-1), kHardLabelLogit);
    } else {
      teacher = in.teacher_logits.gather(1, before.unsqueeze(-1).expand({b, n, cfg_.vocab_size}));
    }
    auto valid_k = valid.select(2, k - 1);
    auto scale = w[static_cast<std::size_t>(k - 1)] / total;
    auto step = step_loss(cfg_.loss, out.select(2, k), weight, teacher, 0, valid_k, scale, cfg_.loss_chunk_size);
    loss = loss + step.weighted;
    auto correct = step.argmax == in.target_argmax.to(dev).gather(1, before);  // full vocabulary: ids are target ids
    rows.push_back(metric_row(valid_k, correct, prefix_ok, step.position_loss));
    prefix_ok = prefix_ok & valid_k & correct;
  }
  return {loss, torch::stack(rows).detach()};
}

std::vector<torch::Tensor> DFlashHead::ttt_logits(const HeadInputs& in) {
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1);
  auto anchors = torch::arange(1, len + 1, in.input_ids.options().dtype(torch::kInt64)).clamp_max(len - 1);
  auto out = block_hidden(in, anchors.unsqueeze(0).expand({b, len}).contiguous());
  std::vector<torch::Tensor> r;
  for (std::int64_t k = 1; k < cfg_.dflash_block_size; ++k) r.push_back(logits(out.select(2, k)));
  return r;
}

DraftCache DFlashHead::new_cache(std::int64_t batch, std::int64_t capacity) const {
  DraftCache c;
  c.keys = torch::zeros({cfg_.num_layers, batch, cfg_.num_key_value_heads, capacity, cfg_.head_dim},
                        fc->weight.options());
  c.values = torch::zeros_like(c.keys);
  return c;
}

torch::Tensor DFlashHead::round_hidden(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                       std::int64_t draft_len) {
  torch::NoGradGuard ng;
  to_device_of_weights();
  const auto dev = fc->weight.device();
  const auto b = features.size(0), added = features.size(1), start = cache.length, n = start + added;
  EAGLE_CHECK(added >= 1 && next_ids.size(1) == added && draft_len >= 1,
              Error(ErrorKind::internal, "a DFlash round needs new positions and their next tokens")
                  .found(fmt::format("features {}, next_ids {}, draft_len {}", c10::str(features.sizes()),
                                     c10::str(next_ids.sizes()), draft_len)));
  EAGLE_CHECK(n <= cache.keys.size(3), Error(ErrorKind::internal, "the draft cache is too small")
                                           .expected(fmt::format("capacity >= {}", n))
                                           .found(fmt::format("{}", cache.keys.size(3))));
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  // The new context positions' keys and values, once per position (vLLM caches them).
  auto u = context(features.to(dev));
  auto ctx_pos = torch::arange(start, n, i64).unsqueeze(0).expand({b, added});
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto [ck, cv] = context_kv(l, u, ctx_pos);
    cache.keys.select(0, l).narrow(2, start, added).copy_(ck);
    cache.values.select(0, l).narrow(2, start, added).copy_(cv);
  }
  cache.length = n;
  // The block [x_n, M ...] at positions n .., every query seeing every key.
  const auto s = round_block(draft_len);
  auto ids =
      torch::cat({next_ids.to(dev).narrow(1, added - 1, 1), torch::full({b, s - 1}, cfg_.mask_token_id, i64)}, 1);
  auto positions = torch::arange(n, n + s, i64).unsqueeze(0).expand({b, s});
  return block_hidden_cached(cache, n, {}, ids, positions, torch::ones({1, n + s}, i64.dtype(torch::kBool)));
}

torch::Tensor DFlashHead::parallel_logits(DraftCache& cache, const torch::Tensor& features,
                                          const torch::Tensor& next_ids, std::int64_t draft_len) {
  auto hidden = round_hidden(cache, features, next_ids, draft_len);
  torch::NoGradGuard ng;
  return logits(hidden.narrow(1, 1, draft_len));
}

torch::Tensor DFlashHead::round_tokens(const torch::Tensor& hidden, const torch::Tensor&) {
  return logits(hidden.narrow(1, 1, hidden.size(1) - 1)).argmax(-1);  // the full vocabulary: target ids
}

torch::Tensor DFlashHead::block_hidden_cached(DraftCache& cache, std::int64_t key_len, const torch::Tensor& rows,
                                              const torch::Tensor& ids, const torch::Tensor& positions,
                                              const torch::Tensor& seen) {
  auto h = embed(ids);
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto& lay = layer(l);
    auto ctx_k = cache.keys.select(0, l).narrow(2, 0, key_len), ctx_v = cache.values.select(0, l).narrow(2, 0, key_len);
    if (rows.defined()) {
      ctx_k = ctx_k.index_select(0, rows);
      ctx_v = ctx_v.index_select(0, rows);
    }
    h = layer_forward(l, h, ids.size(1), [&](const torch::Tensor& x) {
      auto qkv = project_qkv(*lay.self_attn, cfg_, x, inv_freq_, positions);
      return draft_attention(cfg_, qkv.q, torch::cat({ctx_k, qkv.k}, 2), torch::cat({ctx_v, qkv.v}, 2), seen);
    });
  }
  return norm->forward(h);
}

torch::Tensor DFlashHead::draft_ragged(DraftCache& cache, const RaggedDraft& step, std::int64_t draft_len) {
  using torch::indexing::Slice;
  torch::NoGradGuard ng;
  to_device_of_weights();
  const auto dev = fc->weight.device();
  auto malformed = [](const char* field) {
    return Error(ErrorKind::internal, "malformed ragged DFlash round").place(field);
  };
  EAGLE_CHECK(step.next_ids.defined() && step.next_ids.dim() == 2 && step.next_ids.size(1) > 0 && draft_len >= 1,
              malformed("next_ids")
                  .expected("int64 [R, N] with N > 0, draft_len >= 1")
                  .found(fmt::format("{}, draft_len {}", model::tensor_text(step.next_ids), draft_len)));
  const auto r = step.next_ids.size(0), n = step.next_ids.size(1), capacity = cache.keys.size(3);
  model::check_tensor(step.next_ids, torch::kInt64, {r, n}, dev, malformed("next_ids"));
  model::check_tensor(step.columns, torch::kInt64, {r, n}, dev, malformed("columns"));
  model::check_tensor(step.last, torch::kInt64, {r}, dev, malformed("last"));
  model::check_shape(step.features, {r, n, fc->weight.size(1)}, malformed("features"));
  const bool all_rows = !step.rows.defined();
  if (all_rows)
    EAGLE_CHECK(r == cache.keys.size(1),
                malformed("rows").found(fmt::format("undefined with {} of {} rows", r, cache.keys.size(1))));
  else
    model::check_tensor(step.rows, torch::kInt64, {r}, dev, malformed("rows"));
  EAGLE_CHECK(step.key_len > 0 && step.key_len <= capacity,
              Error(ErrorKind::internal, "ragged DFlash round reads outside the draft cache")
                  .expected(fmt::format("key_len in 1..{}", capacity))
                  .found(std::to_string(step.key_len)));
  const auto i64 = step.columns.options();
  const auto rows = all_rows ? torch::arange(r, i64) : step.rows;
  // The new positions' context keys and values at their rows' columns (padding: the spare slot).
  auto u = context(step.features);
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto [ck, cv] = context_kv(l, u, step.columns);
    // Advanced indices on dims 0 and 2 with a slice between them index as [R, N, kv_heads, d].
    cache.keys.select(0, l).index_put_({rows.view({r, 1}), Slice(), step.columns}, ck.transpose(1, 2));
    cache.values.select(0, l).index_put_({rows.view({r, 1}), Slice(), step.columns}, cv.transpose(1, 2));
  }
  // Each row's anchor: the token after its last real position, at the next column n_r; its block
  // sees the row's slots < n_r and the whole block (an idle row's n_r is past the cache: all slots).
  const auto last = step.last.view({r, 1});
  const auto start = step.columns.gather(1, last) + 1;  // [R, 1]
  const auto s = round_block(draft_len);
  const auto anchor = step.next_ids.gather(1, last);
  auto ids = torch::cat({anchor, torch::full({r, s - 1}, cfg_.mask_token_id, i64)}, 1);
  auto positions = start + torch::arange(s, i64).view({1, s});
  auto seen = torch::cat(
      {torch::arange(step.key_len, i64).view({1, step.key_len}) < start, torch::ones({r, s}, i64.dtype(torch::kBool))},
      1);
  auto hidden = block_hidden_cached(cache, step.key_len, all_rows ? torch::Tensor() : rows, ids, positions,
                                    seen.view({r, 1, 1, step.key_len + s}));
  return round_tokens(hidden, anchor.view({r}));
}

torch::Tensor DFlashHead::draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) {
  auto hidden = round_hidden(cache, features, next_ids, draft_len);
  torch::NoGradGuard ng;
  return round_tokens(hidden, next_ids.to(hidden.device()).select(1, next_ids.size(1) - 1));
}

}  // namespace eagle::head
