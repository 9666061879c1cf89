// Multi-head latent attention (DeepSeek-V3, as transformers' DeepseekV3Attention computes it) expressed as
// per-head queries, keys and values (model/mla.h, shared with the MLA draft layer), so that every attention
// path of the target (padded, packed, KV cache, ragged, tree) runs it through the kernels of the other families.
#include "eagle/model/mla.h"
#include "target_impl.h"

namespace eagle::target {

namespace {

// DeepseekV3Attention's q_a_layernorm and kv_a_layernorm are DeepseekV3RMSNorm(rank) with its default eps,
// not config.rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

}  // namespace

MlaQkv mla_qkv(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h, const torch::Tensor& cos,
               const torch::Tensor& sin) {
  const auto d = model::MlaDims::of(c.num_attention_heads, c.attention, kLatentNormEps, c.attention.rope_interleave);
  const auto q_rows = c.attention.q_lora_rank > 0
                          ? c.attention.q_lora_rank
                          : c.num_attention_heads * (c.attention.qk_nope_head_dim + c.attention.qk_rope_head_dim);
  // One matmul for both projections of the hidden state: q_a_proj (or q_proj) and kv_a_proj_with_mqa.
  const auto a = torch::linear(h, w.qkv_w, w.qkv_b);
  const auto m =
      model::mla_heads(d, {w.q_a_norm, w.q_b_w, w.kv_a_norm, w.kv_b_w}, a.narrow(-1, 0, q_rows),
                       a.narrow(-1, q_rows, c.attention.kv_lora_rank + c.attention.qk_rope_head_dim), cos, sin);
  return {m.q, m.k, m.v};
}

}  // namespace eagle::target
