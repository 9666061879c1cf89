// The decoder layer modules of the draft heads and their attention helpers (see head_layer.h).
#include "eagle/head/head_layer.h"

#include <cmath>

#include <fmt/format.h>

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

HeadMlpImpl::HeadMlpImpl(const HeadConfig& cfg) {
  EAGLE_CHECK(cfg.hidden_act == "silu", Error(ErrorKind::usage, "unsupported hidden_act for the draft head")
                                            .place("hidden_act")
                                            .expected("silu")
                                            .found(cfg.hidden_act));
  gate_proj = register_module("gate_proj", linear(cfg.hidden_size, cfg.intermediate_size));
  up_proj = register_module("up_proj", linear(cfg.hidden_size, cfg.intermediate_size));
  down_proj = register_module("down_proj", linear(cfg.intermediate_size, cfg.hidden_size));
}

HeadLayerImpl::HeadLayerImpl(const HeadConfig& cfg, HeadLayerKind kind) {
  const bool first = kind == HeadLayerKind::eagle3_first;
  const auto norm = [&] { return RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_one_plus); };
  if (kind != HeadLayerKind::eagle1) input_layernorm = register_module("input_layernorm", norm());
  if (first) hidden_norm = register_module("hidden_norm", norm());
  self_attn = register_module("self_attn", HeadAttention(cfg, first ? 2 * cfg.hidden_size : cfg.hidden_size));
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  mlp = register_module("mlp", HeadMlp(cfg));
}

torch::Tensor HeadLayerImpl::finish(const torch::Tensor& residual, const torch::Tensor& attention) {
  auto h = residual + attention_output(*self_attn, attention);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

Qkv project_qkv(const HeadAttentionImpl& attn, const HeadConfig& cfg, const torch::Tensor& x,
                const torch::Tensor& inv_freq, const torch::Tensor& positions) {
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
  return torch::linear(a.transpose(1, 2).reshape({b, t, -1}), attn.o_proj->weight);
}

DraftCache make_draft_cache(const HeadConfig& cfg, std::int64_t batch, std::int64_t capacity,
                            torch::TensorOptions options) {
  DraftCache c;
  const auto layers = cfg.eagle_version == 3 ? cfg.num_layers : 1;
  c.keys = torch::zeros({layers, batch, cfg.num_key_value_heads, capacity, cfg.head_dim}, options);
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
  auto s = torch::matmul(q, k.transpose(-1, -2)).to(torch::kFloat32) / std::sqrt(static_cast<double>(cfg.head_dim));
  s = s.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(s, -1).to(v.scalar_type()), v);
}

}  // namespace eagle::head
