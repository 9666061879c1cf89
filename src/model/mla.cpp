// Multi-head latent attention's per-head queries, keys and values (see mla.h).
#include "eagle/model/mla.h"

#include <cmath>

namespace eagle::model {

torch::Tensor mla_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool interleave) {
  if (!interleave) return apply_rope(x, cos, sin, /*head_axis=*/2);
  using torch::indexing::None;
  using torch::indexing::Slice;
  const auto half = cos.size(-1) / 2;
  const auto c = cos.narrow(-1, 0, half).unsqueeze(2), s = sin.narrow(-1, 0, half).unsqueeze(2);
  const auto x1 = x.index({"...", Slice(0, None, 2)}), x2 = x.index({"...", Slice(1, None, 2)});
  // Back to x's dtype: fp32 tables turn a bf16 x in fp32 (DeepSeek-V2's apply_rotary_emb).
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1).to(x.scalar_type());
}

MlaHeads mla_heads(const MlaDims& d, const MlaLatentWeights& w, const torch::Tensor& q_a, const torch::Tensor& kv_a,
                   const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto B = q_a.size(0), T = q_a.size(1), nh = d.heads;
  const auto nope = d.qk_nope_head_dim, rope = d.qk_rope_head_dim, dv = d.v_head_dim;
  auto q = d.q_lora_rank > 0 ? torch::linear(rms_norm(q_a, w.q_a_norm, d.latent_eps), w.q_b) : q_a;
  q = q.view({B, T, nh, nope + rope});
  const auto latent = kv_a.narrow(-1, 0, d.kv_lora_rank);
  const auto k_rot = kv_a.narrow(-1, d.kv_lora_rank, rope).view({B, T, 1, rope});  // one key for all heads
  const auto kv = torch::linear(rms_norm(latent, w.kv_a_norm, d.latent_eps), w.kv_b).view({B, T, nh, nope + dv});
  MlaHeads out;
  out.q = torch::cat({q.narrow(-1, 0, nope), mla_rope(q.narrow(-1, nope, rope), cos, sin, d.rope_interleave)}, -1);
  out.k =
      torch::cat({kv.narrow(-1, 0, nope), mla_rope(k_rot, cos, sin, d.rope_interleave).expand({B, T, nh, rope})}, -1);
  out.v = kv.narrow(-1, nope, dv);
  return out;
}

double yarn_get_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

}  // namespace eagle::model
