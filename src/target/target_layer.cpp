// One decoder layer of the target as each family computes it (TargetModel::Impl): RoPE tables per
// layer type, the family's RMSNorm, attention with its window, sinks and soft cap, the dense MLP or
// the experts, Gemma's extra norms, the scaled embedding and the capped LM head.
#include <cmath>

#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

namespace {

// cos, sin of one RoPE for positions [B, T]; longrope per token from lengths [B, T].
std::pair<torch::Tensor, torch::Tensor> tables(const model::RopeConfig& rope, const torch::Tensor& inv,
                                               const torch::Tensor& long_inv, const torch::Tensor& positions,
                                               const torch::Tensor& lengths, torch::ScalarType dtype) {
  if (rope.type == "dynamic") {
    // Dynamic NTK scales with the longest position of the call (transformers' formula); it stays a
    // device tensor, so nothing waits for the host and a captured graph recomputes it per replay.
    auto seq_len = positions.max() + 1;
    return model::rope_cos_sin(model::rope_inv_freq_dynamic(rope, inv, seq_len), positions, dtype);
  }
  const double scale = model::rope_attention_factor(rope);
  if (rope.type != "longrope") return model::rope_cos_sin(inv, positions, dtype, scale);
  // transformers switches to the long factors when the sequence outgrows the original context.
  const auto use_long = (lengths > rope.original_max_position_embeddings).unsqueeze(-1);
  auto [cos, sin] = model::rope_cos_sin(inv, positions, dtype, scale);
  auto [long_cos, long_sin] = model::rope_cos_sin(long_inv, positions, dtype, scale);
  return {torch::where(use_long, long_cos, cos), torch::where(use_long, long_sin, sin)};
}

}  // namespace

TargetModel::Impl::RopeTables TargetModel::Impl::rope(const torch::Tensor& position_ids,
                                                      const torch::Tensor& lengths) const {
  RopeTables t;
  // DeepSeek-V2 turns its queries and keys in fp32 (AttentionConfig::rope_fp32; model::mla_rope casts back).
  std::tie(t.cos, t.sin) = tables(cfg.rope, inv_freq, long_inv_freq, position_ids, lengths,
                                  cfg.attention.rope_fp32 ? torch::kFloat32 : dtype);
  if (cfg.attention.local_rope)
    std::tie(t.local_cos, t.local_sin) =
        tables(*cfg.attention.local_rope, local_inv_freq, torch::Tensor(), position_ids, lengths, dtype);
  return t;
}

torch::Tensor TargetModel::Impl::norm(const torch::Tensor& x, const torch::Tensor& w) const {
  return target_norm(cfg, x, w);
}

torch::Tensor target_norm(const TargetConfig& config, const torch::Tensor& x, const torch::Tensor& weight) {
  if (config.norm_one_plus) return model::rms_norm_one_plus(x, weight, config.rms_norm_eps);
  return config.norm_weight_fp32 ? model::rms_norm_fp32_weight(x, weight, config.rms_norm_eps)
                                 : model::rms_norm(x, weight, config.rms_norm_eps);
}

double target_attention_scale(const TargetConfig& config) {
  return config.attention.scale > 0 ? config.attention.scale : 1.0 / std::sqrt(static_cast<double>(config.head_dim));
}

namespace {

// A gated MLP from fused gate-and-up rows [2 I, H] and down [H, I].
torch::Tensor gated_mlp(const TargetConfig& cfg, const torch::Tensor& h, const torch::Tensor& gate_up_w,
                        const torch::Tensor& down_w) {
  const auto I = down_w.size(1);
  auto gu = torch::linear(h, gate_up_w);
  auto gate = gu.narrow(-1, 0, I);
  auto act = cfg.hidden_act == "gelu_pytorch_tanh" ? torch::gelu(gate, "tanh") : torch::silu(gate);
  return torch::linear(act * gu.narrow(-1, I, I), down_w);
}

}  // namespace

torch::Tensor TargetModel::Impl::mlp(std::size_t l, const torch::Tensor& h) const {
  const auto& w = layers[l];
  if (!cfg.sparse(static_cast<std::int64_t>(l)) || cfg.gemma4.enabled) return gated_mlp(cfg, h, w.gate_up_w, w.down_w);
  auto y = moe(w, h);
  // DeepSeek-V3, GLM-4.5: the routed experts' sum, then the shared experts' MLP of the same input added;
  // Qwen3-Next, Qwen3.5-MoE: the shared expert times sigmoid(shared_expert_gate(h)).
  if (w.shared_gate_up.defined()) {
    auto shared = gated_mlp(cfg, h, w.shared_gate_up, w.shared_down);
    if (w.shared_gate_w.defined()) shared = torch::sigmoid(torch::linear(h, w.shared_gate_w)) * shared;
    y = y + shared;
  }
  return y;
}

torch::Tensor TargetModel::Impl::layer(std::size_t l, const torch::Tensor& x, const RopeTables& rope,
                                       const Attend& attend, const Mix& mix, Walk& walk) const {
  const auto& w = layers[l];
  const auto B = x.size(0), T = x.size(1);
  const auto li = static_cast<std::int64_t>(l);
  const auto nh = cfg.num_attention_heads, kvh = cfg.layer_kv_heads_of(li), hd = cfg.layer_head_dim(li);
  const auto window = cfg.window(li);

  auto h = norm(x, w.input_norm);
  const bool local = window > 0 && rope.local_cos.defined();
  const auto& cos = local ? rope.local_cos : rope.cos;
  const auto& sin = local ? rope.local_sin : rope.sin;
  // Token-major [B, T, heads, d] throughout: the layout of variable-length flash attention, so the
  // kernels get views, not copies.
  torch::Tensor q, k, v, gate;
  torch::Tensor o;  // the mixed tokens before o_proj, [B, T, heads * value_head_dim] (Gated DeltaNet: value_dim)
  if (cfg.linear(static_cast<std::int64_t>(l))) {
    EAGLE_CHECK(static_cast<bool>(mix), Error(ErrorKind::internal, "a Gated DeltaNet layer without its states"));
    o = mix(l, h);
  } else if (cfg.mla()) {
    auto m = mla_qkv(cfg, w, h, cos, sin);  // RoPE applied; v of value_head_dim
    q = m.q;
    k = m.k;
    v = m.v;
  } else {
    auto qkv = torch::linear(h, w.qkv_w, w.qkv_b);
    // Gated attention (Qwen3.5, Qwen3-Next): each head's q_proj rows are its query, then its output gate.
    const auto qw = cfg.attention.output_gate ? 2 * nh * hd : nh * hd;
    if (cfg.attention.output_gate) {
      const auto qg = qkv.narrow(-1, 0, qw).view({B, T, nh, 2 * hd});
      q = qg.narrow(-1, 0, hd);
      gate = qg.narrow(-1, hd, hd).reshape({B, T, nh * hd});
    } else {
      q = qkv.narrow(-1, 0, nh * hd).view({B, T, nh, hd});
    }
    if (cfg.attention.qk_norm) q = norm(q, w.q_norm);
    q = model::apply_rope(q, cos, sin, /*head_axis=*/2);
    if (cfg.kv_shared(li)) {
      // Gemma 4: the keys and values of its source layer (normed, with RoPE), made earlier in this walk.
      std::tie(k, v) = walk.kv.at(static_cast<std::size_t>(cfg.gemma4.kv_source.at(l)));
    } else {
      k = qkv.narrow(-1, qw, kvh * hd).view({B, T, kvh, hd});
      // attention_k_eq_v: the values are k_proj's output, before k_norm and RoPE.
      v = cfg.values_from_keys(li) ? k : qkv.narrow(-1, qw + kvh * hd, kvh * hd).view({B, T, kvh, hd});
      if (cfg.attention.qk_norm) k = norm(k, w.k_norm);
      k = model::apply_rope(k, cos, sin, /*head_axis=*/2);
      if (cfg.gemma4.value_norm) v = model::rms_norm_unscaled(v, cfg.rms_norm_eps);
      // Kept only where a KV-shared layer will read them (the walk would hold every layer's otherwise).
      if (cfg.gemma4.enabled)
        for (std::int64_t j = cfg.gemma4.first_kv_shared; j < cfg.num_hidden_layers; ++j)
          if (cfg.gemma4.kv_source.at(static_cast<std::size_t>(j)) == li) walk.kv[l] = {k, v};
    }
  }
  if (!o.defined()) {
    const model::AttentionExtras extras{window, w.sinks, cfg.attention.softcap};
    o = attend(l, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), extras);  // [B, heads, T, d_v]
    o = o.transpose(1, 2).reshape({B, T, nh * o.size(-1)});  // each layer's value width (Gemma 4's vary)
    if (gate.defined()) o = o * torch::sigmoid(gate);
  }
  // The position-wise rest (o_proj, residual, MLP or experts) acts on each token alone, so it runs in
  // chunks of chunk_tokens positions: its [.., T, 2 I] temporaries are bounded by the chunk, not T.
  // Gemma 4: then the per-layer input and the layer scalar (gemma4_layer_tail), position-wise as well.
  const auto per_layer = walk.per_layer.defined() ? walk.per_layer.select(2, li) : torch::Tensor();
  const auto rest = [&](const torch::Tensor& xc, const torch::Tensor& oc, const torch::Tensor& pc) {
    auto a = torch::linear(oc, w.o_w, w.o_b);
    if (cfg.sandwich_norms) a = norm(a, w.post_norm);
    auto r = xc + a;
    auto m = mlp(l, norm(r, cfg.sandwich_norms ? w.pre_ff_norm : w.post_norm));
    if (cfg.gemma4.enabled && cfg.sparse(li)) m = gemma4_moe(cfg, w, m, r);  // the experts beside the dense MLP
    if (cfg.sandwich_norms) m = norm(m, w.post_ff_norm);
    return cfg.gemma4.enabled ? gemma4_layer_tail(cfg, w, r + m, pc) : r + m;
  };
  if (chunk_tokens <= 0 || T <= chunk_tokens) return rest(x, o, per_layer);
  auto out = torch::empty_like(x);
  for (std::int64_t s = 0; s < T; s += chunk_tokens) {
    const auto n = std::min(chunk_tokens, T - s);
    out.narrow(1, s, n).copy_(
        rest(x.narrow(1, s, n), o.narrow(1, s, n), per_layer.defined() ? per_layer.narrow(1, s, n) : per_layer));
  }
  return out;
}

torch::Tensor TargetModel::Impl::embed_scaled(const torch::Tensor& ids) const {
  auto e = torch::embedding(embed, ids);
  if (!cfg.embed_scaled) return e;
  // transformers: a float32 scalar sqrt(hidden_size) cast to the weights' dtype, then the product.
  const auto s = torch::scalar_tensor(std::sqrt(static_cast<double>(cfg.hidden_size)),
                                      torch::TensorOptions().dtype(torch::kFloat32).device(e.device()));
  return e * s.to(e.scalar_type());
}

torch::Tensor TargetModel::Impl::logits(const torch::Tensor& final_hidden) const {
  return model::soft_cap(torch::linear(final_hidden, lm_head), cfg.final_softcap);
}

torch::Tensor document_lengths(const torch::Tensor& position_ids, const torch::Tensor& document_ids) {
  const auto b = document_ids.size(0), t = document_ids.size(1);
  auto prev = torch::cat({torch::full({b, 1}, -2, document_ids.options()), document_ids.narrow(1, 0, t - 1)}, 1);
  auto run = (document_ids != prev).to(torch::kInt64).cumsum(1) - 1;  // run index within the row
  auto last = torch::zeros({b, t}, position_ids.options()).scatter_reduce(1, run, position_ids, "amax");
  return last.gather(1, run) + 1;
}

torch::Tensor TargetModel::Impl::run_layers(const torch::Tensor& ids, const RopeTables& rope, const Attend& attend,
                                            const Keep& keep, const Mix& mix) const {
  const auto L = static_cast<std::size_t>(cfg.num_hidden_layers);
  auto x = embed_scaled(ids);
  keep(0, x);
  Walk walk;
  if (cfg.gemma4.enabled) {
    walk.kv.resize(L);
    if (cfg.gemma4.per_layer_input_dim > 0) walk.per_layer = gemma4_per_layer_inputs(cfg, per_layer, ids, x);
  }
  for (std::size_t l = 0; l < L; ++l) {
    x = layer(l, x, rope, attend, mix, walk);
    if (l + 1 < L) keep(static_cast<std::int64_t>(l) + 1, x);
  }
  return x;
}

}  // namespace eagle::target
