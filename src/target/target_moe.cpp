// The mixture-of-experts layers of the target (Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3, GLM-4.5): routing as each
// family's transformers module computes it, the tokens sorted by expert and run through grouped
// matmuls, and the MXFP4 dequantization of gpt-oss checkpoints.
#include <limits>

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "target_impl.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace eagle::target {

namespace {

// Whether at::_grouped_mm takes these operands: 16-byte aligned rows; fp32 on CPU (its reference
// loop, which runs the same operator sequence as the device path, so the host-sync probe sees it),
// bf16 on CUDA from sm90 (the CUTLASS kernel reading the offsets on the device).
bool grouped_mm_runs(const torch::Tensor& x, std::int64_t in, std::int64_t out) {
  const auto bytes = static_cast<std::int64_t>(x.element_size());
  if ((in * bytes) % 16 != 0 || (out * bytes) % 16 != 0) return false;
  if (x.is_cpu()) return x.scalar_type() == torch::kFloat32;
#ifdef EAGLE_WITH_CUDA
  return x.is_cuda() && x.scalar_type() == torch::kBFloat16 &&
         at::cuda::getDeviceProperties(x.device().index())->major >= 9;
#else
  return false;
#endif
}

// x [M, in] sorted by expert, counts [E] int64 rows per expert, w [E, out, in] -> [M, out].
torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& counts, const torch::Tensor& w) {
  if (grouped_mm_runs(x, w.size(2), w.size(1)))
    return at::_grouped_mm(x, w.transpose(1, 2), counts.cumsum(0).to(torch::kInt32));
  // Elsewhere one matmul per expert with rows, the counts read on the host (not graph-safe on CUDA).
  const auto host = counts.to(torch::kCPU);
  const auto* n = host.data_ptr<std::int64_t>();
  auto out = torch::empty({x.size(0), w.size(1)}, x.options());
  std::int64_t start = 0;
  for (std::int64_t e = 0; e < w.size(0); start += n[e], ++e)
    if (n[e] > 0) out.narrow(0, start, n[e]).copy_(torch::linear(x.narrow(0, start, n[e]), w[e]));
  return out;
}

// DeepSeek-V3 / GLM-4.5's router (DeepseekV3TopkRouter, Glm4MoeTopkRouter) on fp32 logits [N, E]: the
// (weights [N, k] fp32, chosen [N, k]) pairs. Device work only (no host synchronisation).
std::pair<torch::Tensor, torch::Tensor> sigmoid_grouped_route(const TargetConfig& c, const torch::Tensor& logits,
                                                              const torch::Tensor& score_bias) {
  const auto E = c.num_experts, G = c.n_group;
  const auto scores = logits.sigmoid();
  const auto choice = scores + score_bias;
  // A group's score: the sum of its two best; the topk_group best groups stay, the other experts drop out.
  const auto group_scores = std::get<0>(choice.view({-1, G, E / G}).topk(2, -1)).sum(-1);
  const auto groups = std::get<1>(group_scores.topk(c.topk_group, -1, /*largest=*/true, /*sorted=*/false));
  const auto group_mask = torch::zeros_like(group_scores).scatter_(1, groups, 1.0);
  const auto keep = group_mask.unsqueeze(-1).expand({-1, G, E / G}).reshape({-1, E}).to(torch::kBool);
  const auto masked = choice.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
  auto chosen = std::get<1>(masked.topk(c.experts_per_token, -1, /*largest=*/true, /*sorted=*/false));
  auto weights = scores.gather(1, chosen);
  if (c.norm_topk_prob) weights = weights / (weights.sum(-1, /*keepdim=*/true) + 1e-20);
  return {weights * c.routed_scaling_factor, chosen};
}

}  // namespace

torch::Tensor TargetModel::Impl::moe(const TargetLayerWeights& w, const torch::Tensor& x) const {
  const auto H = x.size(-1), k = cfg.experts_per_token, E = cfg.num_experts;
  const auto flat = x.reshape({-1, H});
  torch::Tensor weights, chosen;
  if (cfg.routing == MoeRouting::sigmoid_grouped) {  // the router in fp32, whatever the model's dtype
    const auto logits = torch::linear(flat.to(torch::kFloat32), w.router_w.to(torch::kFloat32));
    std::tie(weights, chosen) = sigmoid_grouped_route(cfg, logits, w.router_score_bias);
  } else if (cfg.routing == MoeRouting::softmax_topk) {
    const auto logits = torch::linear(flat, w.router_w, w.router_b);  // [N, E]
    std::tie(weights, chosen) = torch::softmax(logits.to(torch::kFloat32), -1).topk(k, -1);
    if (cfg.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
    if (!cfg.routing_weights_fp32) weights = weights.to(logits.scalar_type());
  } else {
    const auto logits = torch::linear(flat, w.router_w, w.router_b);
    auto [top, idx] = logits.topk(k, -1);
    weights = torch::softmax(top, -1);
    chosen = idx;
  }
  // The N k (token, expert) pairs sorted by expert: one contiguous run of rows per expert.
  const auto pairs = chosen.reshape({-1});
  const auto order = torch::argsort(pairs, /*stable=*/true);
  const auto sorted_expert = pairs.index_select(0, order);
  const auto xs = flat.index_select(0, order.floor_divide(k));
  const auto counts = torch::zeros({E}, pairs.options()).scatter_add_(0, pairs, torch::ones_like(pairs));

  auto gate_up = grouped_linear(xs, counts, w.experts_gate_up);  // [N k, 2 I]
  if (w.experts_gate_up_b.defined()) gate_up = gate_up + w.experts_gate_up_b.index_select(0, sorted_expert);
  const auto I = gate_up.size(1) / 2;
  auto gate = gate_up.narrow(1, 0, I), up = gate_up.narrow(1, I, I);
  torch::Tensor act;
  if (cfg.clamped_swiglu) {  // GptOssExperts._apply_gate
    gate = gate.clamp_max(cfg.swiglu_limit);
    up = up.clamp(-cfg.swiglu_limit, cfg.swiglu_limit);
    act = (up + 1) * (gate * torch::sigmoid(gate * cfg.swiglu_alpha));
  } else {
    act = torch::silu(gate) * up;
  }
  auto y = grouped_linear(act, counts, w.experts_down);  // [N k, H]
  if (w.experts_down_b.defined()) y = y + w.experts_down_b.index_select(0, sorted_expert);
  y = (y * weights.reshape({-1}).index_select(0, order).unsqueeze(1)).to(x.scalar_type());
  // Back to (token, choice) order, then each token's k outputs summed.
  auto unsorted = torch::empty_like(y).index_copy_(0, order, y);
  return unsorted.view({-1, k, H}).sum(1).view(x.sizes());
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
