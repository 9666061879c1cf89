// The mixture-of-experts layers of the target (Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3, GLM-4.5, Qwen3-Next,
// Qwen3.5-MoE; Gemma 4's block beside its MLP: target_gemma4.cpp): the routing and the experts of model/moe.h
// (shared with the MTP head's MoE block), and the MXFP4 dequantization of gpt-oss checkpoints.
#include <fmt/format.h>

#include "eagle/model/moe.h"
#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

model::MoeRouter TargetConfig::moe_router() const {
  model::MoeRouter r;
  r.routing = moe.routing;
  r.num_experts = moe.num_experts;
  r.experts_per_token = moe.experts_per_token;
  r.norm_topk_prob = moe.norm_topk_prob;
  r.routing_weights_fp32 = moe.routing_weights_fp32;
  r.n_group = moe.n_group;
  r.topk_group = moe.topk_group;
  r.routed_scaling_factor = moe.routed_scaling_factor;
  r.input_norm_eps = rms_norm_eps;  // Gemma 4's router norms its input
  return r;
}

torch::Tensor TargetModel::Impl::moe(const TargetLayerWeights& w, const torch::Tensor& x) const {
  const auto flat = x.reshape({-1, x.size(-1)});
  const auto route = model::route_experts(cfg.moe_router(), flat, w.router_w, w.router_b, w.router_score_bias);
  const model::ExpertWeights experts{w.experts_gate_up, w.experts_gate_up_b, w.experts_down, w.experts_down_b};
  return model::run_experts(flat, route, experts, {cfg.moe.clamped_swiglu, cfg.moe.swiglu_alpha, cfg.moe.swiglu_limit})
      .view(x.sizes());
}

torch::Tensor dequantize_mxfp4(const torch::Tensor& blocks, const torch::Tensor& scales, torch::ScalarType dtype,
                               const std::string& name) {
  auto bad = [&](const std::string& tensor, const std::string& what) {
    return Error(ErrorKind::input, what).place(fmt::format("tensor \"{}\"", tensor));
  };
  EAGLE_CHECK(
      blocks.scalar_type() == torch::kUInt8 && scales.scalar_type() == torch::kUInt8,
      bad(name + "_blocks", "MXFP4 blocks and scales must be uint8")
          .found(fmt::format("{} and {}", c10::toString(blocks.scalar_type()), c10::toString(scales.scalar_type()))));
  EAGLE_CHECK(
      blocks.dim() == 4 && blocks.size(3) == 16 && scales.dim() == 3 && blocks.sizes().slice(0, 3) == scales.sizes(),
      bad(name + "_blocks", "MXFP4 blocks must be [E, rows, G, 16] with scales [E, rows, G]")
          .found(fmt::format("{} and {}", c10::str(blocks.sizes()), c10::str(scales.sizes()))));
  // transformers' FP4_VALUES: e2m1, the sign in the nibble's top bit.
  static const float kFp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  // E8M0 scales: 2^(s - 127); 255 is the format's NaN, and a block that overflows the dtype holds no
  // real weights either: both are refused, naming the tensor.
  const auto nan_codes = scales.eq(255).sum().item<std::int64_t>();
  EAGLE_CHECK(nan_codes == 0, bad(name + "_scales", "MXFP4 scale 255 is E8M0's NaN")
                                  .expected("exponents 0..254")
                                  .found(fmt::format("{} scales of 255", nan_codes))
                                  .hint("no real checkpoint holds these: the file is damaged"));
  const auto lut = torch::from_blob(const_cast<float*>(kFp4), {16}, torch::kFloat32).to(blocks.device(), dtype);
  const auto E = blocks.size(0), rows = blocks.size(1), G = blocks.size(2);
  auto out = torch::empty({E, rows, G * 32}, blocks.options().dtype(dtype));
  for (std::int64_t e = 0; e < E; ++e) {
    const auto b = blocks[e].to(torch::kInt32);
    const auto lo = lut.index_select(0, b.bitwise_and(0x0F).reshape({-1})).view(b.sizes());
    const auto hi = lut.index_select(0, b.bitwise_right_shift(4).reshape({-1})).view(b.sizes());
    const auto values = torch::stack({lo, hi}, -1).view({rows, G, 32});  // low nibble first
    const auto exponent = (scales[e].to(torch::kInt32) - 127).unsqueeze(-1);
    out[e].copy_(torch::ldexp(values, exponent).view({rows, G * 32}));
  }
  EAGLE_CHECK(
      torch::isfinite(out).all().item<bool>(),
      bad(name + "_scales", "MXFP4 blocks times their scales overflow the target's dtype")
          .found(fmt::format("largest scale {} (2^{})", scales.max().item<int>(), scales.max().item<int>() - 127))
          .hint("no real checkpoint holds these: the file is damaged"));
  return out;
}

}  // namespace eagle::target
