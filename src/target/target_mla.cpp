// Multi-head latent attention (DeepSeek-V3, as transformers' DeepseekV3Attention computes it) expressed as
// per-head queries, keys and values, so that every attention path of the target (padded, packed, KV
// cache, ragged, tree) runs it through the kernels of the other families.
#include "target_impl.h"

namespace eagle::target {

namespace {

// DeepseekV3Attention's q_a_layernorm and kv_a_layernorm are DeepseekV3RMSNorm(rank) with its default eps,
// not config.rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

// RoPE on x [B, T, heads, r] with cos, sin [B, T, r]: rotate-half, or DeepSeek's interleaved pairs
// (apply_rotary_pos_emb_interleave: even features x1, odd x2, each pair turned by one angle, written back
// as [x1 cos - x2 sin, x2 cos + x1 sin], the layout transformers attends in).
torch::Tensor rope_part(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool interleave) {
  if (!interleave) return model::apply_rope(x, cos, sin, /*head_axis=*/2);
  using torch::indexing::None;
  using torch::indexing::Slice;
  const auto half = cos.size(-1) / 2;
  const auto c = cos.narrow(-1, 0, half).unsqueeze(2), s = sin.narrow(-1, 0, half).unsqueeze(2);
  const auto x1 = x.index({"...", Slice(0, None, 2)}), x2 = x.index({"...", Slice(1, None, 2)});
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

}  // namespace

MlaQkv mla_qkv(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h, const torch::Tensor& cos,
               const torch::Tensor& sin) {
  const auto B = h.size(0), T = h.size(1), nh = c.num_attention_heads;
  const auto nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, dv = c.v_head_dim;
  const auto q_rows = c.q_lora_rank > 0 ? c.q_lora_rank : nh * (nope + rope);
  // One matmul for both projections of the hidden state: q_a_proj (or q_proj) and kv_a_proj_with_mqa.
  const auto a = torch::linear(h, w.qkv_w, w.qkv_b);
  auto q = a.narrow(-1, 0, q_rows);
  if (c.q_lora_rank > 0) q = torch::linear(model::rms_norm(q, w.q_a_norm, kLatentNormEps), w.q_b_w);
  q = q.view({B, T, nh, nope + rope});
  const auto latent = a.narrow(-1, q_rows, c.kv_lora_rank);
  const auto k_rot = a.narrow(-1, q_rows + c.kv_lora_rank, rope).view({B, T, 1, rope});  // one key for all heads
  const auto kv =
      torch::linear(model::rms_norm(latent, w.kv_a_norm, kLatentNormEps), w.kv_b_w).view({B, T, nh, nope + dv});
  MlaQkv out;
  out.q = torch::cat({q.narrow(-1, 0, nope), rope_part(q.narrow(-1, nope, rope), cos, sin, c.rope_interleave)}, -1);
  out.k =
      torch::cat({kv.narrow(-1, 0, nope), rope_part(k_rot, cos, sin, c.rope_interleave).expand({B, T, nh, rope})}, -1);
  out.v = kv.narrow(-1, nope, dv);
  return out;
}

}  // namespace eagle::target
