// The decoder layer modules of the draft heads and their attention helpers (see head_layer.h).
#include "eagle/head/layer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eagle/head/moe.h"
#include "eagle/model/mla.h"
#include "eagle/util/error.h"

namespace eagle::head {

RmsNormImpl::RmsNormImpl(std::int64_t size, double eps_, bool one_plus_) : eps(eps_), one_plus(one_plus_) {
  weight = register_parameter("weight", one_plus ? torch::zeros({size}) : torch::ones({size}));
}

namespace {
torch::nn::Linear linear(std::int64_t in, std::int64_t out, bool bias = false) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
}  // namespace

HeadAttentionImpl::HeadAttentionImpl(const HeadConfig& cfg, std::int64_t input_size) {
  value_dim = cfg.mla() ? cfg.v_head_dim : cfg.head_dim;
  if (cfg.mla()) {  // vLLM's DeepseekV2MLAAttention with input_size (2H on layer 0), no biases
    const auto nh = cfg.num_attention_heads;
    q_a_proj = register_module("q_a_proj", linear(input_size, cfg.q_lora_rank));
    q_a_layernorm = register_module("q_a_layernorm", RmsNorm(cfg.q_lora_rank, cfg.rms_norm_eps));
    q_b_proj = register_module("q_b_proj", linear(cfg.q_lora_rank, nh * cfg.head_dim));
    kv_a_proj_with_mqa =
        register_module("kv_a_proj_with_mqa", linear(input_size, cfg.kv_lora_rank + cfg.qk_rope_head_dim));
    kv_a_layernorm = register_module("kv_a_layernorm", RmsNorm(cfg.kv_lora_rank, cfg.rms_norm_eps));
    kv_b_proj = register_module("kv_b_proj", linear(cfg.kv_lora_rank, nh * (cfg.qk_nope_head_dim + cfg.v_head_dim)));
    o_proj = register_module("o_proj", linear(nh * cfg.v_head_dim, cfg.hidden_size));
    return;
  }
  const bool bias = cfg.attention_bias;
  const auto q_rows = (cfg.attn_output_gate ? 2 : 1) * cfg.num_attention_heads * cfg.head_dim;
  q_proj = register_module("q_proj", linear(input_size, q_rows, bias));
  k_proj = register_module("k_proj", linear(input_size, cfg.num_key_value_heads * cfg.head_dim, bias));
  v_proj = register_module("v_proj", linear(input_size, cfg.num_key_value_heads * cfg.head_dim, bias));
  o_proj = register_module("o_proj", linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(cfg.head_dim, cfg.rms_norm_eps, cfg.norm_one_plus));
    k_norm = register_module("k_norm", RmsNorm(cfg.head_dim, cfg.rms_norm_eps, cfg.norm_one_plus));
  }
}

HeadLayerImpl::HeadLayerImpl(const HeadConfig& cfg, HeadLayerKind kind) {
  const bool first = kind == HeadLayerKind::eagle3_first;
  const auto norm = [&] { return RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_one_plus); };
  if (kind != HeadLayerKind::eagle1) input_layernorm = register_module("input_layernorm", norm());
  if (first) hidden_norm = register_module("hidden_norm", norm());
  self_attn = register_module("self_attn", HeadAttention(cfg, first ? 2 * cfg.hidden_size : cfg.hidden_size));
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  if (cfg.moe())
    moe = register_module("mlp", std::make_shared<HeadMoeImpl>(cfg));
  else
    mlp = register_module("mlp", HeadMlp(cfg));
}

torch::Tensor HeadLayerImpl::finish(const torch::Tensor& residual, const torch::Tensor& attention) {
  auto h = residual + attention_output(*self_attn, attention);
  const auto x = post_attention_layernorm->forward(h);
  return h + (moe ? moe->forward(x) : mlp->forward(x));
}

double attention_scale(const HeadConfig& cfg) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
  if (!cfg.mla() || cfg.rope.type == "default") return scale;
  const double m = model::yarn_get_mscale(cfg.rope.factor, cfg.rope.mscale_all_dim);
  return scale * m * m;
}

std::int64_t attention_width(const HeadConfig& cfg) {
  return cfg.mla() ? std::max(cfg.head_dim, cfg.v_head_dim) : cfg.head_dim;
}

namespace {

// What cos and sin are multiplied by in vLLM's DeepseekScalingRotaryEmbedding (deepseek_yarn):
// yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim), mscale 1 when not given
// (0 reads as not given); its attn_factor is not a key this head writes.
double mla_rope_factor(const model::RopeConfig& r) {
  if (r.type == "default") return 1.0;
  return model::yarn_get_mscale(r.factor, r.mscale != 0 ? r.mscale : 1.0) /
         model::yarn_get_mscale(r.factor, r.mscale_all_dim);
}

// The MLA layer's q, k, v [B, heads, T, attention_width] (model/mla.h), the narrower side zero-padded.
Qkv mla_qkv(const HeadAttentionImpl& attn, const HeadConfig& cfg, const torch::Tensor& x, const torch::Tensor& inv_freq,
            const torch::Tensor& positions) {
  // vLLM: RMSNorm(rank, eps=config.rms_norm_eps); get_rope(..., is_neox_style=False).
  const auto d = model::MlaDims::of(cfg.num_attention_heads, cfg, cfg.rms_norm_eps, /*rope_interleave=*/true);
  auto [cos, sin] = model::rope_cos_sin(inv_freq, positions, x.scalar_type(), mla_rope_factor(cfg.rope));
  const auto m = model::mla_heads(
      d, {attn.q_a_layernorm->weight, attn.q_b_proj->weight, attn.kv_a_layernorm->weight, attn.kv_b_proj->weight},
      torch::linear(x, attn.q_a_proj->weight), torch::linear(x, attn.kv_a_proj_with_mqa->weight), cos, sin);
  const auto w = attention_width(cfg);
  auto pad = [w](const torch::Tensor& t) {
    const auto n = t.size(-1);
    return (n == w ? t : torch::constant_pad_nd(t, {0, w - n})).transpose(1, 2);
  };
  return {pad(m.q), pad(m.k), pad(m.v)};
}

}  // namespace

Qkv project_qkv(const HeadAttentionImpl& attn, const HeadConfig& cfg, const torch::Tensor& x,
                const torch::Tensor& inv_freq, const torch::Tensor& positions) {
  if (cfg.mla()) return mla_qkv(attn, cfg, x, inv_freq, positions);
  // The biases are undefined (none) unless cfg.attention_bias.
  return heads_of_projections(attn, cfg, torch::linear(x, attn.q_proj->weight, attn.q_proj->bias),
                              torch::linear(x, attn.k_proj->weight, attn.k_proj->bias),
                              torch::linear(x, attn.v_proj->weight, attn.v_proj->bias), inv_freq, positions);
}

Qkv heads_of_projections(const HeadAttentionImpl& attn, const HeadConfig& cfg, const torch::Tensor& q_flat,
                         const torch::Tensor& k_flat, const torch::Tensor& v_flat, const torch::Tensor& inv_freq,
                         const torch::Tensor& positions) {
  const auto b = q_flat.size(0), t = q_flat.size(1), d = cfg.head_dim;
  torch::Tensor q, gate;
  if (cfg.attn_output_gate) {  // each head's rows: its query, then its output gate (transformers' Qwen3_5Attention)
    const auto qg = q_flat.view({b, t, cfg.num_attention_heads, 2 * d});
    q = qg.narrow(-1, 0, d).transpose(1, 2);
    gate = qg.narrow(-1, d, d).transpose(1, 2);
  } else {
    q = q_flat.view({b, t, cfg.num_attention_heads, d}).transpose(1, 2);
  }
  auto k = k_flat.view({b, t, cfg.num_key_value_heads, d}).transpose(1, 2);
  if (attn.q_norm) {  // Qwen3-style layer: each head's q and k normalised before RoPE
    q = attn.q_norm->forward(q);
    k = attn.k_norm->forward(k);
  }
  auto v = v_flat.view({b, t, cfg.num_key_value_heads, d}).transpose(1, 2);
  auto [cos, sin] = model::rope_cos_sin(inv_freq, positions, q.scalar_type(), model::rope_attention_factor(cfg.rope));
  return {model::apply_rope(q, cos, sin), model::apply_rope(k, cos, sin), v, gate};
}

torch::Tensor gate_attention(const torch::Tensor& attention, const torch::Tensor& gate) {
  return gate.defined() ? attention * torch::sigmoid(gate) : attention;
}

torch::Tensor attention_output(const HeadAttentionImpl& attn, const torch::Tensor& a) {
  const auto b = a.size(0), t = a.size(2);
  const auto v = a.size(-1) == attn.value_dim ? a : a.narrow(-1, 0, attn.value_dim);  // MLA: padding dropped
  return torch::linear(v.transpose(1, 2).reshape({b, t, -1}), attn.o_proj->weight);
}

DraftCache make_draft_cache(const HeadConfig& cfg, std::int64_t batch, std::int64_t capacity,
                            torch::TensorOptions options) {
  DraftCache c;
  const auto layers = cfg.eagle_version == 3 ? cfg.num_layers : 1;
  c.keys = torch::zeros({layers, batch, cfg.num_key_value_heads, capacity, attention_width(cfg)}, options);
  c.values = torch::zeros_like(c.keys);
  return c;
}

torch::Tensor cached_attention(DraftCache& cache, const HeadConfig& cfg, std::int64_t start, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, std::int64_t layer) {
  const auto n = q.size(2), end = start + n;
  auto layer_keys = cache.keys.select(0, layer), layer_values = cache.values.select(0, layer);
  EAGLE_CHECK(end <= layer_keys.size(2), Error(ErrorKind::internal, "the draft cache is too small")
                                             .expected(fmt::format("capacity >= {}", end))
                                             .found(fmt::format("{}", layer_keys.size(2))));
  layer_keys.narrow(2, start, n).copy_(k);
  layer_values.narrow(2, start, n).copy_(v);
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  auto mask = torch::arange(0, end, opts).view({1, end}) <= torch::arange(start, end, opts).view({n, 1});
  return draft_attention(cfg, q, layer_keys.narrow(2, 0, end), layer_values.narrow(2, 0, end), mask);
}

torch::Tensor masked_cached_attention(DraftCache& cache, const HeadConfig& cfg, std::int64_t slot,
                                      const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& mask, std::int64_t layer) {
  const auto n = q.size(2), end = slot + n;
  auto layer_keys = cache.keys.select(0, layer), layer_values = cache.values.select(0, layer);
  EAGLE_CHECK(end <= layer_keys.size(2), Error(ErrorKind::internal, "the draft cache is too small")
                                             .expected(fmt::format("capacity >= {}", end))
                                             .found(fmt::format("{}", layer_keys.size(2))));
  EAGLE_CHECK(mask.dim() == 2 && mask.size(0) == n && mask.size(1) == end,
              Error(ErrorKind::internal, "draft tree mask has the wrong shape")
                  .expected(fmt::format("[{}, {}]", n, end))
                  .found(c10::str(mask.sizes())));
  layer_keys.narrow(2, slot, n).copy_(k);
  layer_values.narrow(2, slot, n).copy_(v);
  return draft_attention(cfg, q, layer_keys.narrow(2, 0, end), layer_values.narrow(2, 0, end),
                         mask.to(q.device(), torch::kBool));
}

torch::Tensor draft_attention(const HeadConfig& cfg, const torch::Tensor& q, const torch::Tensor& keys,
                              const torch::Tensor& values, const torch::Tensor& mask) {
  const auto rep = cfg.num_attention_heads / cfg.num_key_value_heads;
  const auto k = model::repeat_kv(keys, rep), v = model::repeat_kv(values, rep);
  auto s = torch::matmul(q, k.transpose(-1, -2)).to(torch::kFloat32);
  s = cfg.mla() ? s * attention_scale(cfg) : s / std::sqrt(static_cast<double>(cfg.head_dim));
  s = s.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(s, -1).to(v.scalar_type()), v);
}

}  // namespace eagle::head
