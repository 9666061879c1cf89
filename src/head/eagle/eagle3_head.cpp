// EAGLE-3 head: training-time-test forward, loss and metrics, and incremental drafting.
#include "eagle/head/eagle/eagle3_head.h"

#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "eagle/head/fused_loss.h"
#include "eagle/head/loss.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::head {

Eagle3Head::Eagle3Head(HeadConfig cfg, const DraftVocab& vocab) : cfg_(std::move(cfg)) {
  EAGLE_CHECK(vocab.size() == cfg_.draft_vocab_size && vocab.target_vocab_size == cfg_.vocab_size,
              Error(ErrorKind::internal, "draft vocabulary does not match the head config")
                  .expected(fmt::format("{} of {}", cfg_.draft_vocab_size, cfg_.vocab_size))
                  .found(fmt::format("{} of {}", vocab.size(), vocab.target_vocab_size)));
  if (cfg_.mla()) {  // vLLM's deepseek_eagle3.py: no input_norm, no P-EAGLE; one MLA layer here
    const char* bad = cfg_.norm_before_fc      ? "norm_before_fc"
                      : cfg_.parallel_drafting ? "parallel_drafting"
                      : cfg_.num_layers > 1    ? "draft_num_layers"
                      : cfg_.qk_norm           ? "the Qwen3-style q/k norm"
                      : cfg_.attention_bias    ? "attention_bias"
                                               : nullptr;
    EAGLE_CHECK(!bad, Error(ErrorKind::usage, "the MLA draft layer (draft_layer deepseek) does not take this variant")
                          .place(bad ? bad : "")
                          .expected("one MLA layer, optionally with fc_norm and norm_output (what vLLM's "
                                    "deepseek_eagle3.py serves and this tool trains)")
                          .found(bad ? bad : ""));
  }
  const auto n_aux = static_cast<std::int64_t>(cfg_.aux_layer_ids.size());
  fc = register_module(
      "fc", torch::nn::Linear(torch::nn::LinearOptions(n_aux * cfg_.target_hidden_size, cfg_.hidden_size).bias(false)));
  if (cfg_.norm_before_fc)
    input_norm = register_module("input_norm", RmsNorm(n_aux * cfg_.target_hidden_size, cfg_.rms_norm_eps));
  if (cfg_.fc_norm) {
    fc_norm = register_module("fc_norm", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < n_aux; ++i) fc_norm->push_back(RmsNorm(cfg_.target_hidden_size, cfg_.rms_norm_eps));
  }
  midlayer = register_module("midlayer", HeadLayer(cfg_, HeadLayerKind::eagle3_first));
  if (cfg_.num_layers > 1) {  // exported as layers.{l}.* (l >= 1): see head_io.cpp
    extra_layers = register_module("extra_layers", torch::nn::ModuleList());
    for (std::int64_t l = 1; l < cfg_.num_layers; ++l) extra_layers->push_back(HeadLayer(cfg_, HeadLayerKind::decoder));
  }
  norm = register_module("norm", RmsNorm(cfg_.hidden_size, cfg_.rms_norm_eps));
  lm_head = register_module(
      "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg_.hidden_size, cfg_.draft_vocab_size).bias(false)));
  if (cfg_.parallel_drafting) {
    EAGLE_CHECK(cfg_.mask_token_id >= 0 && cfg_.mask_token_id < cfg_.vocab_size,
                Error(ErrorKind::usage, "P-EAGLE needs a mask token inside the target's vocabulary")
                    .place("mask_token_id")
                    .expected(fmt::format("an id in [0, {})", cfg_.vocab_size))
                    .found(std::to_string(cfg_.mask_token_id)));
    // speculators 0.9: a random normal vector in aux space, trained (EAGLE-variants.md §4).
    mask_hidden = register_parameter("mask_hidden", torch::randn({1, 1, n_aux * cfg_.target_hidden_size}));
  }
  d2t = register_buffer("d2t", vocab.d2t());
  t2d = register_buffer("t2d", vocab.t2d());
  draft_ids = register_buffer("draft_ids", vocab.ids());
  inv_freq_ = model::rope_inv_freq_serving(cfg_.rope);
}

DraftVocab Eagle3Head::vocab() const { return DraftVocab::from_d2t(d2t, cfg_.vocab_size); }

void Eagle3Head::set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head_weight) {
  model::check_shape(embedding, {cfg_.vocab_size, cfg_.hidden_size},
                     Error(ErrorKind::input, "target embedding does not fit the head").place("embed_tokens.weight"));
  embedding_ = embedding.detach();
  // Onto the head's device now, not lazily in the first training step: a host-to-device copy there
  // would synchronise inside a CUDA graph's warm-up.
  inv_freq_ = inv_freq_.to(fc->weight.device());
}

void Eagle3Head::init_from_target(const torch::Tensor& embedding, const torch::Tensor& lm_head_weight) {
  set_target_weights(embedding, lm_head_weight);
  init_lm_head_from_target(lm_head_weight);
}

void Eagle3Head::init_lm_head_from_target(const torch::Tensor& target_lm_head) {
  torch::NoGradGuard ng;
  auto rows = target_lm_head.index_select(0, draft_ids.to(target_lm_head.device()));
  lm_head->weight.copy_(rows.to(lm_head->weight.device(), lm_head->weight.scalar_type()));
}

torch::Tensor Eagle3Head::embed(const torch::Tensor& ids) const {
  EAGLE_CHECK(embedding_.defined(),
              Error(ErrorKind::internal, "the head has no target embedding").hint("call set_target_weights first"));
  torch::NoGradGuard ng;
  return torch::embedding(embedding_, ids.to(embedding_.device())).to(fc->weight.scalar_type());
}

torch::Tensor Eagle3Head::combine(const torch::Tensor& aux_in) {
  auto u = aux_in.to(fc->weight.scalar_type());
  if (input_norm) u = input_norm->forward(u);
  if (fc_norm) {  // vLLM: input_norm first, then one norm per feature chunk (never both: refused)
    std::vector<torch::Tensor> chunks;
    const auto n = static_cast<std::int64_t>(fc_norm->size());
    for (std::int64_t i = 0; i < n; ++i)
      chunks.push_back(fc_norm[static_cast<std::size_t>(i)]->as<RmsNormImpl>()->forward(
          u.narrow(-1, i * cfg_.target_hidden_size, cfg_.target_hidden_size)));
    u = torch::cat(chunks, -1);
  }
  return fc->forward(u);
}

torch::Tensor Eagle3Head::next_state(const torch::Tensor& h) { return cfg_.norm_output ? norm->forward(h) : h; }

HeadLayerImpl& Eagle3Head::layer(std::int64_t l) {
  return l == 0 ? *midlayer : *extra_layers[static_cast<std::size_t>(l - 1)]->as<HeadLayerImpl>();
}

torch::Tensor Eagle3Head::layer_input(std::int64_t l, const torch::Tensor& emb, const torch::Tensor& state,
                                      const torch::Tensor& h) {
  auto& lay = layer(l);
  if (l > 0) return lay.input_layernorm->forward(h);  // F3: a plain pre-norm layer on h_{l-1}
  return torch::cat({lay.input_layernorm->forward(emb), lay.hidden_norm->forward(state)}, -1);  // F2
}

Qkv Eagle3Head::step_qkv(std::int64_t l, const torch::Tensor& ids, const torch::Tensor& state, const torch::Tensor& h,
                         const torch::Tensor& positions) {
  auto qkv_of = [this, l](const torch::Tensor& ids_, const torch::Tensor& state_, const torch::Tensor& h_,
                          const torch::Tensor& positions_) {
    auto emb = l == 0 ? embed(ids_) : torch::Tensor();  // layers >= 1 read h only
    return project_qkv(*layer(l).self_attn, cfg_, layer_input(l, emb, state_, h_), inv_freq_, positions_);
  };
  if (cfg_.recompute != RecomputeMode::layer) return qkv_of(ids, state, h, positions);
  auto& lay = layer(l);
  if (lay.self_attn->q_norm || cfg_.mla()) {
    // Qwen3-style q/k norms (and MLA's latent norms) read the projections: the whole half is made again
    // in backward.
    auto outs = recompute(
        [qkv_of](const std::vector<torch::Tensor>& x) {
          auto r = qkv_of(x[0], x[1], x[2], x[3]);
          return std::vector<torch::Tensor>{r.q, r.k, r.v};
        },
        {ids, state, h, positions}, lay.parameters());
    return {outs[0], outs[1], outs[2], {}};  // no output gate in an EAGLE layer
  }
  // Kept: the state (the previous step's output, alive anyway), the ids and h; the embedding, the
  // input norms and their concatenation are made again in backward, q/k/v projected once (their
  // RoPE keeps only its cos/sin).
  std::vector<torch::Tensor> norms{lay.input_layernorm->weight};
  if (lay.hidden_norm) norms.push_back(lay.hidden_norm->weight);
  const auto& attn = *lay.self_attn;
  auto flat = recompute_input(
      [this, l](const std::vector<torch::Tensor>& x) {
        auto emb = l == 0 ? embed(x[0]) : torch::Tensor();
        return std::vector<torch::Tensor>{layer_input(l, emb, x[1], x[2])};
      },
      {ids, state, h}, norms, {attn.q_proj->weight, attn.k_proj->weight, attn.v_proj->weight});
  return heads_of_projections(attn, cfg_, flat[0], flat[1], flat[2], inv_freq_, positions);
}

std::pair<torch::Tensor, torch::Tensor> Eagle3Head::step_finish(std::int64_t l, const torch::Tensor& h,
                                                                const torch::Tensor& attention) {
  const bool last = l + 1 == cfg_.num_layers;
  if (cfg_.recompute == RecomputeMode::off) {
    auto out = layer(l).finish(h, attention);
    return {out, last ? norm->forward(out) : torch::Tensor()};
  }
  // Kept: the residual and the attention's output; o_proj, the MLP and the norms made again.
  auto params = layer(l).parameters();
  if (last) params.push_back(norm->weight);
  auto outs = recompute(
      [this, l, last](const std::vector<torch::Tensor>& x) {
        auto out = layer(l).finish(x[0], x[1]);
        if (!last) return std::vector<torch::Tensor>{out};
        return std::vector<torch::Tensor>{out, norm->forward(out)};
      },
      {h, attention}, params);
  return {outs[0], last ? outs[1] : torch::Tensor()};
}

template <typename Visit>
void Eagle3Head::unroll(const HeadInputs& in, Visit&& visit) {
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const double scale = attention_scale(cfg_);
  auto hidden = combine(in.aux_hidden);
  const model::AttentionLayout layout(in.document_ids, in.attention);
  // Every layer keeps its own step-0 keys and diagonal keys; the same TTT mask in each.
  const auto n_layers = static_cast<std::size_t>(cfg_.num_layers);
  std::vector<torch::Tensor> k0(n_layers), v0(n_layers);
  std::vector<std::vector<torch::Tensor>> kds(n_layers), vds(n_layers);
  for (std::int64_t k = 0; k < cfg_.ttt_steps; ++k) {
    // Step k at position t: token x_{t+1+k}, the previous step's hidden, RoPE position + k. P-EAGLE's
    // depth k >= 1: token mask_token_id and the state F1(mask_hidden) at every t (no recurrence).
    const bool masked = cfg_.parallel_drafting && k > 0;
    if (masked) hidden = combine(mask_hidden).expand_as(hidden);
    auto ids = masked ? torch::full_like(in.input_ids, cfg_.mask_token_id) : shift_left(in.input_ids, k + 1, 0.0);
    const auto positions = in.position_ids + k;
    auto h = hidden;  // the state enters the residual stream at layer 0 only
    torch::Tensor normed;
    for (std::size_t l = 0; l < n_layers; ++l) {
      const auto li = static_cast<std::int64_t>(l);
      auto qkv = step_qkv(li, ids, hidden, h, positions);
      if (k == 0) {
        k0[l] = qkv.k;
        v0[l] = qkv.v;
      } else {
        kds[l].push_back(qkv.k);
        vds[l].push_back(qkv.v);
      }
      std::tie(h, normed) =
          step_finish(li, h, ttt_attention(cfg_.attention, qkv.q, k0[l], v0[l], kds[l], vds[l], layout, scale));
    }
    visit(k, StepResult{h, normed});
    // The recomputed finish made norm(h) once for the loss and the state (the same values).
    hidden = cfg_.recompute == RecomputeMode::off || !cfg_.norm_output ? next_state(h) : normed;
  }
}

std::vector<torch::Tensor> Eagle3Head::ttt_logits(const HeadInputs& in) {
  std::vector<torch::Tensor> out;
  unroll(in, [&](std::int64_t, const StepResult& r) { out.push_back(lm_head->forward(r.normed)); });
  return out;
}

HeadStepOutput Eagle3Head::train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) {
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1);
  check_row_inputs(in);
  check_head_input(in.aux_hidden, "aux_hidden", {b, len, fc->weight.size(1)});
  check_head_input(in.teacher_logits, "teacher_logits", {b, len, cfg_.draft_vocab_size});
  EAGLE_CHECK(denominators.numel() == cfg_.ttt_steps,
              Error(ErrorKind::internal, "loss denominators do not match the TTT steps")
                  .place("denominators")
                  .expected(fmt::format("{} values", cfg_.ttt_steps))
                  .found(fmt::format("{}", denominators.numel())));
  auto den = denominators.to(fc->weight.device(), torch::kFloat32).clamp_min(1.0);
  auto loss = torch::zeros({}, den.options());
  std::vector<torch::Tensor> rows;
  auto prefix_ok = torch::ones_like(in.input_ids, torch::TensorOptions().dtype(torch::kBool));
  const auto teacher_logits = in.teacher_logits.contiguous();  // one copy at most, shared by the steps
  StepLossSum head_sum;                                        // the steps' LM-head gradient, summed
  unroll(in, [&](std::int64_t k, const StepResult& r) {
    // Teacher of step k at t: the target's distribution at t+1+k (restricted to the draft ids), made
    // per chunk with the logits and the loss in step_loss (head/fused_loss.h).
    auto target_next = shift_left(in.target_argmax, k + 1, 0.0);
    auto valid = in_document_mask(in.loss_mask, in.document_ids, k) & t2d.index({target_next});
    auto scale = std::pow(cfg_.ttt_loss_decay, static_cast<double>(k)) / den[k];
    auto step = step_loss(cfg_.loss, r.normed, lm_head->weight, teacher_logits, k + 1, valid, scale,
                          cfg_.loss_chunk_size, &head_sum);
    loss = loss + step.weighted;
    auto correct = draft_ids.index({step.argmax}) == target_next;
    rows.push_back(metric_row(valid, correct, prefix_ok, step.position_loss));
    prefix_ok = prefix_ok & valid & correct;
  });
  return {loss, torch::stack(rows).detach()};
}

DraftCache Eagle3Head::new_cache(std::int64_t batch, std::int64_t capacity) const {
  return make_draft_cache(cfg_, batch, capacity, fc->weight.options());
}

torch::Tensor Eagle3Head::draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) {
  torch::NoGradGuard ng;
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  if (cfg_.parallel_drafting)
    return draft_ids.index({parallel_forward(cache, features, next_ids, draft_len).argmax(-1)});
  const auto n = features.size(1);
  const auto start = cache.length;
  auto h = cached_layers(cache, combine(features.to(dev)), next_ids.to(dev), start, start);
  cache.length = start + n;
  std::vector<torch::Tensor> drafted;
  auto last = h.narrow(1, n - 1, 1);
  for (std::int64_t j = 0; j < draft_len; ++j) {
    auto token = draft_ids.index({lm_head->forward(norm->forward(last)).argmax(-1)});  // [B, 1] target ids
    drafted.push_back(token);
    if (j + 1 == draft_len) break;
    // Chained step j+1: the slot after the prefix's last position, RoPE position last + j + 1.
    last = cached_layers(cache, next_state(last), token, cache.length + j, cache.length - 1 + j + 1);
  }
  return torch::cat(drafted, 1);
}

torch::Tensor Eagle3Head::cached_layers(DraftCache& cache, const torch::Tensor& state, const torch::Tensor& ids,
                                        std::int64_t start, std::int64_t pos0) {
  const auto b = ids.size(0), len = ids.size(1);
  auto emb = embed(ids);
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(state.device());
  auto positions = torch::arange(pos0, pos0 + len, opts).unsqueeze(0).expand({b, len});
  auto h = state;
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto raw = project_qkv(*layer(l).self_attn, cfg_, layer_input(l, emb, state, h), inv_freq_, positions);
    h = layer(l).finish(h, cached_attention(cache, cfg_, start, raw.q, raw.k, raw.v, l));
  }
  return h;
}

torch::Tensor Eagle3Head::parallel_forward(DraftCache& cache, const torch::Tensor& features,
                                           const torch::Tensor& next_ids, std::int64_t draft_len) {
  const auto dev = fc->weight.device();
  const auto b = features.size(0), n = features.size(1), masks = draft_len - 1;
  // Slots: the n new prefix positions (token x_{t+1}, state F1(g_t), position t), then the mask
  // slots i = 1..K-1 (mask_token_id, F1(mask_hidden), position p + i), causal over all of them.
  auto states = combine(features.to(dev));
  auto ids = next_ids.to(dev);
  if (masks > 0) {
    states = torch::cat({states, combine(mask_hidden).expand({b, masks, cfg_.hidden_size})}, 1);
    ids = torch::cat({ids, torch::full({b, masks}, cfg_.mask_token_id, ids.options())}, 1);
  }
  const auto start = cache.length;
  auto h = cached_layers(cache, states, ids, start, start);
  cache.length = start + n;  // the mask slots' keys are forgotten: the next round rewrites them
  // d_1 from the last prefix slot p, d_{i+1} from mask slot i.
  return lm_head->forward(norm->forward(h.narrow(1, n - 1, draft_len)));
}

}  // namespace eagle::head
