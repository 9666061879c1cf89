// Multi-head latent attention (DeepSeek-V2/V3's MLA) as per-head queries, keys and values, shared by the
// DeepSeek targets (transformers' DeepseekV3Attention) and the MLA draft layer (vLLM's
// DeepseekV2MLAAttention in deepseek_eagle3.py): the latent projections, the nope/rope split, the
// interleaved RoPE and the YaRN softmax scale.
#pragma once

#include <torch/torch.h>

#include "eagle/model/layers.h"

namespace eagle::model {

struct MlaDims {
  std::int64_t heads = 0;
  std::int64_t q_lora_rank = 0;  // 0: q straight from the input (q_proj), no latent query
  std::int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // The latent norms' eps: transformers' DeepseekV3RMSNorm default 1e-6, vLLM's config.rms_norm_eps.
  double latent_eps = 1e-6;
  bool rope_interleave = true;  // DeepSeek's interleaved pairs (vLLM: is_neox_style=False)

  // The geometry of heads of attention over a config holding the five MLA widths (target::AttentionConfig,
  // head::HeadConfig), filled once.
  template <typename Widths>
  static MlaDims of(std::int64_t heads, const Widths& w, double latent_eps, bool rope_interleave) {
    MlaDims d;
    d.heads = heads;
    d.q_lora_rank = w.q_lora_rank;
    d.kv_lora_rank = w.kv_lora_rank;
    d.qk_nope_head_dim = w.qk_nope_head_dim;
    d.qk_rope_head_dim = w.qk_rope_head_dim;
    d.v_head_dim = w.v_head_dim;
    d.latent_eps = latent_eps;
    d.rope_interleave = rope_interleave;
    return d;
  }
};

// What the latent side reads: q_a_norm [q_lora_rank] and q_b [heads * (nope + rope), q_lora_rank] (both
// undefined when q_lora_rank is 0), kv_a_norm [kv_lora_rank], kv_b [heads * (nope + v), kv_lora_rank].
struct MlaLatentWeights {
  torch::Tensor q_a_norm, q_b, kv_a_norm, kv_b;
};

// q and k [B, T, heads, nope + rope] (k's rope part the one shared key, broadcast over the heads), v
// [B, T, heads, v_head_dim], RoPE applied.
struct MlaHeads {
  torch::Tensor q, k, v;
};

// From the projections of the input: q_a [B, T, q_lora_rank] (q_a_proj; q_lora_rank 0: q_proj's
// [B, T, heads * (nope + rope)]) and kv_a [B, T, kv_lora_rank + rope] (kv_a_proj_with_mqa), with cos, sin
// [B, T, qk_rope_head_dim] (rotate-half layout of the frequencies).
MlaHeads mla_heads(const MlaDims& d, const MlaLatentWeights& w, const torch::Tensor& q_a, const torch::Tensor& kv_a,
                   const torch::Tensor& cos, const torch::Tensor& sin);

// RoPE on x [B, T, heads, r] with cos, sin [B, T, r]: rotate-half, or DeepSeek's interleaved pairs
// (transformers' apply_rotary_pos_emb_interleave: even features x1, odd x2, each pair turned by one angle,
// written back as [x1 cos - x2 sin, x2 cos + x1 sin]; vLLM's GPT-J style keeps the pairs in place, the
// same scores since queries and keys are permuted alike). Interleaved, cos and sin may be fp32 for a bf16 x
// (DeepSeek-V2 turns in fp32); the result is in x's dtype.
torch::Tensor mla_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool interleave);

// yarn_get_mscale (transformers and vLLM alike): 1 for scales up to 1, else 0.1 * m * ln(scale) + 1.
double yarn_get_mscale(double scale, double m);

}  // namespace eagle::model
