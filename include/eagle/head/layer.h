// The modules of a head's one decoder layer, registered under the names the export formats use
// (input_layernorm, hidden_norm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
// mlp.{gate,up,down}_proj), plus the attention helpers the heads share.
#pragma once

#include <torch/torch.h>

#include "eagle/head/head.h"
#include "eagle/head/mlp.h"

namespace eagle::head {

// RMSNorm with one registered parameter "weight": x * w (ones at start), or with one_plus Gemma's
// x * (1 + w) in fp32 (zeros at start; Qwen3.5's MTP layer).
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(std::int64_t size, double eps, bool one_plus = false);
  torch::Tensor forward(const torch::Tensor& x) const {
    return one_plus ? model::rms_norm_one_plus(x, weight, eps) : model::rms_norm(x, weight, eps);
  }
  torch::Tensor weight;
  double eps;
  bool one_plus;
};
TORCH_MODULE(RmsNorm);

// q_proj has heads * head_dim rows, or twice that with cfg.attn_output_gate ([query | gate] per head).
struct HeadAttentionImpl : torch::nn::Module {
  HeadAttentionImpl(const HeadConfig& cfg, std::int64_t input_size);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // [head_dim], the Qwen3-style layer only (cfg.qk_norm)
  // The MLA layer (cfg.mla(), vLLM's DeepseekV2MLAAttention names; q/k/v_proj null): q_a_proj [q_lora_rank,
  // in], q_a_layernorm, q_b_proj [heads * head_dim, q_lora_rank], kv_a_proj_with_mqa [kv_lora_rank +
  // qk_rope, in], kv_a_layernorm, kv_b_proj [heads * (qk_nope + v), kv_lora_rank]; o_proj [H, heads * v].
  torch::nn::Linear q_a_proj{nullptr}, q_b_proj{nullptr}, kv_a_proj_with_mqa{nullptr}, kv_b_proj{nullptr};
  RmsNorm q_a_layernorm{nullptr}, kv_a_layernorm{nullptr};
  std::int64_t value_dim = 0;  // each head's value width before o_proj (MLA's v_head_dim; else head_dim)
};
TORCH_MODULE(HeadAttention);

// The forms of a head's decoder layer: EAGLE-3's first (input [e; s] of 2H, input_layernorm on e and
// hidden_norm on s), EAGLE-1's (input H, no input norm), and a plain pre-norm layer on H (EAGLE-3's
// layers >= 1: input_layernorm, no hidden_norm).
enum class HeadLayerKind { eagle3_first, eagle1, decoder };

struct HeadMoeImpl;  // head_moe.h

struct HeadLayerImpl : torch::nn::Module {
  HeadLayerImpl(const HeadConfig& cfg, HeadLayerKind kind);
  // The layer after its attention: h = residual + o_proj(attention); h + mlp(norm(h)).
  // attention is [B, heads, T, head_dim].
  torch::Tensor finish(const torch::Tensor& residual, const torch::Tensor& attention);
  RmsNorm input_layernorm{nullptr}, hidden_norm{nullptr}, post_attention_layernorm{nullptr};
  HeadAttention self_attn{nullptr};
  HeadMlp mlp{nullptr};
  // cfg.moe(): the mixture-of-experts MLP (head_moe.h) registered as "mlp" in place of the dense one.
  std::shared_ptr<HeadMoeImpl> moe;
};
TORCH_MODULE(HeadLayer);

// The attention's score scale: head_dim^-1/2; the MLA layer's (vLLM's DeepseekV2MLAAttention) is
// (qk_nope + qk_rope)^-1/2, times yarn_get_mscale(factor, mscale_all_dim)^2 under YaRN.
double attention_scale(const HeadConfig& cfg);
// The width of each head's queries, keys and values in the attention and the draft cache: head_dim; the
// MLA layer's max(qk_nope + qk_rope, v_head_dim), the narrower side zero-padded (zeros in q and k change
// no score, in v no output; attention_output drops the padding).
std::int64_t attention_width(const HeadConfig& cfg);

// q, k, v of x [B, T, in] with RoPE at positions [B, T]; k and v keep the key/value heads (what the
// attention kernels and a KV cache take). The MLA layer's are [B, heads, T, attention_width].
struct Qkv {
  torch::Tensor q, k, v;  // q [B, h, T, d]; k, v [B, kv_heads, T, d]
  torch::Tensor gate;     // [B, h, T, d] the output gate's logits (cfg.attn_output_gate), else undefined
};
// The attention [B, h, T, d] times sigmoid(gate) where the layer is gated (gate defined), else as it is.
torch::Tensor gate_attention(const torch::Tensor& attention, const torch::Tensor& gate);
Qkv project_qkv(const HeadAttentionImpl& attn, const HeadConfig& cfg, const torch::Tensor& x,
                const torch::Tensor& inv_freq, const torch::Tensor& positions);
// The same from the projections x q_proj^T, x k_proj^T, x v_proj^T [B, T, heads * d] made elsewhere
// (recompute_input: their input made again in backward, the projections not).
Qkv heads_of_projections(const HeadAttentionImpl& attn, const HeadConfig& cfg, const torch::Tensor& q_flat,
                         const torch::Tensor& k_flat, const torch::Tensor& v_flat, const torch::Tensor& inv_freq,
                         const torch::Tensor& positions);
// [B, h, T, d] -> o_proj([B, T, h*d]) (the MLA layer: d narrowed to its value width first)
torch::Tensor attention_output(const HeadAttentionImpl& attn, const torch::Tensor& a);

// The drafting attention of queries q [B, h, n, d] over cached keys and values [B, kv_heads, S, d]
// (grouped heads repeated) where mask (bool, broadcast to [B, h, n, S]) allows: fp32 scores scaled by
// attention_scale, softmax, weighted values. Every drafting path (draft(), the tree's nodes, many rows
// at once) computes its attention here, so they agree bit for bit on equal inputs.
torch::Tensor draft_attention(const HeadConfig& cfg, const torch::Tensor& q, const torch::Tensor& keys,
                              const torch::Tensor& values, const torch::Tensor& mask);

// Drafting attention of one layer: queries q [B, h, n, d] at cache slots [start, start+n) over that
// layer's first start+n slots, causally; writes k, v [B, kv_heads, n, d] (not repeated) into the
// cache first.
torch::Tensor cached_attention(DraftCache& cache, const HeadConfig& cfg, std::int64_t start, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, std::int64_t layer = 0);

// cached_attention with an explicit mask [n, slot + n] (bool: query i sees slot j) instead of the causal
// one: a draft tree's nodes written at slots [slot, slot + n) (DraftHead::draft_nodes).
torch::Tensor masked_cached_attention(DraftCache& cache, const HeadConfig& cfg, std::int64_t slot,
                                      const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& mask, std::int64_t layer = 0);

// A cache of cfg.num_layers layers (EAGLE-1: one).
DraftCache make_draft_cache(const HeadConfig& cfg, std::int64_t batch, std::int64_t capacity,
                            torch::TensorOptions options);

}  // namespace eagle::head
