// The MTP head (see mtp_head.h): the families' MTP forward as their MtpLayout describes it, its
// training-time-test unroll, loss and metrics, and incremental drafting.
#include "eagle/head/mtp/head.h"

#include <cmath>

#include <fmt/format.h>

#include "eagle/head/fused_loss.h"
#include "eagle/head/loss.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::head {

MtpHead::MtpHead(HeadConfig cfg) : cfg_(std::move(cfg)), layout_(mtp_layout(cfg_)) {
  const auto& l = layout();
  EAGLE_CHECK(cfg_.eagle_version == 3 && cfg_.num_layers == 1 && cfg_.draft_vocab_size == cfg_.vocab_size &&
                  !cfg_.parallel_drafting && cfg_.norm_one_plus == l.norm_one_plus &&
                  cfg_.attn_output_gate == l.attn_output_gate && cfg_.mla() == l.mla &&
                  (l.qk_norm_of_target || cfg_.qk_norm == l.qk_norm),
              Error(ErrorKind::internal, "not an MTP head config")
                  .expected("eagle_version 3, one layer, the full vocabulary, the family's norms and attention")
                  .found(fmt::format("mtp_family '{}', eagle_version {}, {} layers, {} of {} ids", cfg_.mtp_family,
                                     cfg_.eagle_version, cfg_.num_layers, cfg_.draft_vocab_size, cfg_.vocab_size)));
  const auto h = cfg_.hidden_size;
  const auto norm = [&] { return RmsNorm(h, cfg_.rms_norm_eps, l.norm_one_plus); };
  embedding_norm = register_module(l.embedding_norm, norm());
  hidden_norm = register_module(l.hidden_norm, norm());
  projection = register_module(l.projection, torch::nn::Linear(torch::nn::LinearOptions(2 * h, h).bias(false)));
  mtp_block = register_module("mtp_block", HeadLayer(cfg_, HeadLayerKind::decoder));
  // DeepSeek's and GLM's shared_head.norm: the norm inside a holder module named shared_head.
  if (const auto dot = l.output_norm.find('.'); dot != std::string::npos) {
    auto holder = register_module(l.output_norm.substr(0, dot), std::make_shared<torch::nn::Module>());
    output_norm = holder->register_module(l.output_norm.substr(dot + 1), norm());
  } else {
    output_norm = register_module(l.output_norm, norm());
  }
  const auto vocab = DraftVocab::identity(cfg_.vocab_size);
  d2t = register_buffer("d2t", vocab.d2t());
  t2d = register_buffer("t2d", vocab.t2d());
  draft_ids = register_buffer("draft_ids", vocab.ids());
  inv_freq_ = model::rope_inv_freq_serving(cfg_.rope);
}

void MtpHead::set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) {
  for (auto [t, name] : {std::pair{&embedding, "embed_tokens.weight"}, {&lm_head, "lm_head.weight"}})
    model::check_shape(*t, {cfg_.vocab_size, cfg_.hidden_size},
                       Error(ErrorKind::input, "target tensor does not fit the MTP head").place(name));
  embedding_ = embedding.detach();
  lm_head_ = lm_head.detach();
  inv_freq_ = inv_freq_.to(projection->weight.device());
}

// In the LM head's dtype, as vLLM computes them (and never a [V, H] copy of it per drafted token).
torch::Tensor MtpHead::logits(const torch::Tensor& o) const {
  return torch::linear(o.to(lm_head_.scalar_type()), lm_head_).to(torch::kFloat32);
}

MtpHead::StepInput MtpHead::step_input(const torch::Tensor& ids, const torch::Tensor& state,
                                       const torch::Tensor& positions) {
  EAGLE_CHECK(embedding_.defined(),
              Error(ErrorKind::internal, "the head has no target embedding").hint("call set_target_weights first"));
  const auto dtype = projection->weight.scalar_type();
  torch::Tensor e;
  {
    torch::NoGradGuard ng;
    e = torch::embedding(embedding_, ids.to(embedding_.device())).to(projection->weight.device(), dtype);
    // vLLM's mimo_mtp.py, deepseek_mtp.py, glm4_moe_mtp.py: the embedding zeroed where positions == 0 (only
    // step 1 has position 0).
    if (layout().mask_position0) e = e * (positions != 0).unsqueeze(-1).to(dtype);
  }
  auto a = embedding_norm->forward(e), b = hidden_norm->forward(state.to(dtype));
  // MiMo: hidden first (MTP.md 2.4); Qwen, DeepSeek, GLM: [embedding; hidden].
  auto u = projection->forward(layout().embedding_first ? torch::cat({a, b}, -1) : torch::cat({b, a}, -1));
  auto qkv = project_qkv(*mtp_block->self_attn, cfg_, mtp_block->input_layernorm->forward(u), inv_freq_, positions);
  return {u, qkv};
}

MtpHead::StepOutput MtpHead::step_output(const torch::Tensor& u, const torch::Tensor& attention,
                                         const torch::Tensor& gate) {
  const bool normed = layout().feed_back_normed;
  // x: u, the attention, and its gate's logits where the layer is gated.
  auto fn = [this, normed](const std::vector<torch::Tensor>& x) {
    auto z = mtp_block->finish(x[0], x.size() == 3 ? gate_attention(x[1], x[2]) : x[1]);
    auto o = output_norm->forward(z);
    return normed ? std::vector<torch::Tensor>{o} : std::vector<torch::Tensor>{o, z};
  };
  std::vector<torch::Tensor> in{u, attention};
  if (gate.defined()) in.push_back(gate);
  std::vector<torch::Tensor> out;
  if (cfg_.recompute == RecomputeMode::off || !torch::GradMode::is_enabled()) {  // drafting: no backward
    out = fn(in);
  } else {
    // Kept: u, the attention's output (and gate); the gating, o_proj, the MLP and the norms made again
    // in backward.
    auto params = mtp_block->parameters();
    params.push_back(output_norm->weight);
    out = recompute(fn, in, params);
  }
  return {out[0], normed ? out[0] : out[1]};
}

template <typename Visit>
void MtpHead::unroll(const HeadInputs& in, Visit&& visit) {
  const auto dev = projection->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const double scale = attention_scale(cfg_);  // head_dim^-1/2; MLA's with its YaRN mscale
  const model::AttentionLayout layout(in.document_ids, in.attention);
  // Step 1 (k = 0) at t: the target's h_t (MiMo: pre-norm, the others: post-norm) and x_{t+1} at position t;
  // step k + 1: the chain's fed-back state and x_{t+1+k} at position t + k, attending the step-1 keys s <= t and the
  // chain's earlier steps (the EAGLE-3 TTT mask, MTP.md 2.0).
  auto state = in.aux_hidden;
  torch::Tensor k0, v0;
  std::vector<torch::Tensor> kd, vd;
  for (std::int64_t k = 0; k < cfg_.ttt_steps; ++k) {
    auto step = step_input(shift_left(in.input_ids, k + 1, 0.0), state, in.position_ids + k);
    if (k == 0) {
      k0 = step.qkv.k;
      v0 = step.qkv.v;
    } else {
      kd.push_back(step.qkv.k);
      vd.push_back(step.qkv.v);
    }
    auto out =
        step_output(step.u, ttt_attention(cfg_.attention, step.qkv.q, k0, v0, kd, vd, layout, scale), step.qkv.gate);
    state = out.state;
    visit(k, out.o);
  }
}

std::vector<torch::Tensor> MtpHead::ttt_logits(const HeadInputs& in) {
  std::vector<torch::Tensor> out;
  unroll(in, [&](std::int64_t, const torch::Tensor& o) { out.push_back(logits(o)); });
  return out;
}

HeadStepOutput MtpHead::train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) {
  const auto b = in.input_ids.size(0), len = in.input_ids.size(1);
  auto check = [&](const torch::Tensor& t, const char* name, c10::IntArrayRef shape) {
    model::check_shape(
        t, shape,
        Error(ErrorKind::internal, "head input has the wrong shape").place(fmt::format("HeadInputs.{}", name)));
  };
  for (auto [t, name] : {std::pair{&in.loss_mask, "loss_mask"},
                         {&in.position_ids, "position_ids"},
                         {&in.document_ids, "document_ids"},
                         {&in.target_argmax, "target_argmax"}})
    check(*t, name, {b, len});
  check(in.aux_hidden, "aux_hidden", {b, len, cfg_.hidden_size});
  check(in.teacher_logits, "teacher_logits", {b, len, cfg_.vocab_size});
  EAGLE_CHECK(denominators.numel() == cfg_.ttt_steps,
              Error(ErrorKind::internal, "loss denominators do not match the TTT steps")
                  .place("denominators")
                  .expected(fmt::format("{} values", cfg_.ttt_steps))
                  .found(fmt::format("{}", denominators.numel())));
  auto den = denominators.to(projection->weight.device(), torch::kFloat32).clamp_min(1.0);
  auto loss = torch::zeros({}, den.options());
  std::vector<torch::Tensor> rows;
  auto prefix_ok = torch::ones_like(in.input_ids, torch::TensorOptions().dtype(torch::kBool));
  const auto teacher_logits = in.teacher_logits.contiguous();
  // The LM head is the target's and frozen: passed in the head's dtype for the unchunked path (the
  // chunked one casts it to the compute dtype itself and makes no gradient for it).
  const auto weight = cfg_.loss_chunk_size == 0 ? lm_head_.to(projection->weight.scalar_type()) : lm_head_;
  unroll(in, [&](std::int64_t k, const torch::Tensor& o) {
    // The rules of the EAGLE-3 loss (EAGLE.md): step k at t predicts x_{t+k+2}, the teacher is the
    // target's distribution at t+k+1; every id is in the (full) draft vocabulary.
    auto target_next = shift_left(in.target_argmax, k + 1, 0.0);
    auto valid = in_document_mask(in.loss_mask, in.document_ids, k);
    auto scale = std::pow(cfg_.ttt_loss_decay, static_cast<double>(k)) / den[k];
    auto step = step_loss(cfg_.loss, o, weight, teacher_logits, k + 1, valid, scale, cfg_.loss_chunk_size);
    loss = loss + step.weighted;
    auto correct = step.argmax == target_next;
    rows.push_back(metric_row(valid, correct, prefix_ok, step.position_loss));
    prefix_ok = prefix_ok & valid & correct;
  });
  return {loss, torch::stack(rows).detach()};
}

DraftCache MtpHead::new_cache(std::int64_t batch, std::int64_t capacity) const {
  return make_draft_cache(cfg_, batch, capacity, projection->weight.options());
}

MtpHead::StepOutput MtpHead::cached_step(DraftCache& cache, const torch::Tensor& state, const torch::Tensor& ids,
                                         std::int64_t start, std::int64_t pos0) {
  const auto b = ids.size(0), len = ids.size(1);
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(state.device());
  auto positions = torch::arange(pos0, pos0 + len, opts).unsqueeze(0).expand({b, len});
  auto step = step_input(ids, state, positions);
  auto attention = cached_attention(cache, cfg_, start, step.qkv.q, step.qkv.k, step.qkv.v);
  return step_output(step.u, attention, step.qkv.gate);
}

torch::Tensor MtpHead::draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                             std::int64_t draft_len) {
  torch::NoGradGuard ng;
  const auto dev = projection->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const auto n = features.size(1);
  const auto start = cache.length;
  // vLLM's draft prefill: every new verified position's (h_t, x_{t+1}) at position t into the
  // layer's own cache; then k - 1 decode steps on the fed-back state at position + 1.
  auto out = cached_step(cache, features.to(dev), next_ids.to(dev), start, start);
  cache.length = start + n;
  std::vector<torch::Tensor> drafted;
  auto o = out.o.narrow(1, n - 1, 1), state = out.state.narrow(1, n - 1, 1);
  for (std::int64_t j = 0; j < draft_len; ++j) {
    auto token = logits(o).argmax(-1);  // [B, 1]: the full vocabulary, ids are target ids
    drafted.push_back(token);
    if (j + 1 == draft_len) break;
    out = cached_step(cache, state, token, cache.length + j, cache.length + j);
    o = out.o;
    state = out.state;
  }
  return torch::cat(drafted, 1);
}

DraftHead::Step MtpHead::draft_extend(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids) {
  torch::NoGradGuard ng;
  const auto dev = projection->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  const auto n = features.size(1), start = cache.length;
  auto out = cached_step(cache, features.to(dev), next_ids.to(dev), start, start);
  cache.length = start + n;
  return {out.state.narrow(1, n - 1, 1), logits(out.o.narrow(1, n - 1, 1))};
}

DraftHead::Step MtpHead::draft_nodes(DraftCache& cache, const torch::Tensor& states, const torch::Tensor& ids,
                                     const torch::Tensor& positions, std::int64_t slot, const torch::Tensor& mask) {
  torch::NoGradGuard ng;
  const auto dev = projection->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  auto step = step_input(ids.to(dev), states.to(dev), positions.to(dev));
  auto attention = masked_cached_attention(cache, cfg_, slot, step.qkv.q, step.qkv.k, step.qkv.v, mask);
  auto out = step_output(step.u, attention, step.qkv.gate);
  return {out.state, logits(out.o)};
}

}  // namespace eagle::head
