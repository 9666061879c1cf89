// Mixture-of-experts routing and the routed experts' forward (see moe.h): routing as each family's
// transformers module computes it, the tokens sorted by expert and run through grouped matmuls.
#include "eagle/model/moe.h"

#include <cmath>
#include <limits>

#include "eagle/model/layers.h"
#include "eagle/util/error.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace eagle::model {

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
torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& counts, const torch::Tensor& w,
                             bool grouped_mm) {
  if (grouped_mm && grouped_mm_runs(x, w.size(2), w.size(1)))
    return at::_grouped_mm(x, w.transpose(1, 2), counts.cumsum(0).to(torch::kInt32));
  // Elsewhere one matmul per expert with rows, the counts read on the host (not graph-safe on CUDA);
  // differentiable (each run's rows are written into the output through copy_).
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
MoeRoute sigmoid_grouped_route(const MoeRouter& c, const torch::Tensor& logits, const torch::Tensor& score_bias) {
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

// DeepSeek-V2's router (DeepseekV2TopkRouter) on fp32 logits [N, E]: softmax scores; group_limited_greedy
// (n_group > 1) keeps the topk_group groups whose best score is largest and zeroes the others' scores, as
// transformers does (masked_fill 0.0, not -inf; the reader keeps k within the kept experts); greedy: the k
// best of all. No renormalisation (transformers never applies norm_topk_prob here).
MoeRoute softmax_grouped_route(const MoeRouter& c, const torch::Tensor& logits) {
  const auto E = c.num_experts, G = c.n_group;
  auto scores = logits.softmax(-1);
  if (G > 1) {
    const auto group_scores = std::get<0>(scores.view({-1, G, E / G}).max(-1));
    const auto groups = std::get<1>(group_scores.topk(c.topk_group, -1, /*largest=*/true, /*sorted=*/false));
    const auto group_mask = torch::zeros_like(group_scores).scatter_(1, groups, 1.0);
    const auto keep = group_mask.unsqueeze(-1).expand({-1, G, E / G}).reshape({-1, E}).to(torch::kBool);
    scores = scores.masked_fill(keep.logical_not(), 0.0);
  }
  auto [weights, chosen] = scores.topk(c.experts_per_token, -1, /*largest=*/true, /*sorted=*/false);
  return {weights * c.routed_scaling_factor, chosen};
}

// Gemma 4's router (Gemma4TextRouter) on tokens x [N, H]: the logits of the normed, scaled input in x's dtype,
// softmax_topk's fp32 choice renormalised, then each weight times its expert's scale (the fp32 product kept).
MoeRoute scaled_softmax_route(const MoeRouter& c, const torch::Tensor& x, const torch::Tensor& router_w,
                              const torch::Tensor& input_scale, const torch::Tensor& expert_scale) {
  EAGLE_CHECK(input_scale.defined() && expert_scale.defined(),
              Error(ErrorKind::internal, "Gemma 4's router needs its scale and per_expert_scale"));
  // transformers: norm(x) * scale * hidden_size^-0.5, each product in x's dtype.
  const auto h = rms_norm_unscaled(x, c.input_norm_eps) * input_scale * std::pow(static_cast<double>(x.size(-1)), -0.5);
  const auto probs = torch::softmax(torch::linear(h, router_w).to(torch::kFloat32), -1);
  auto [weights, chosen] = probs.topk(c.experts_per_token, -1);
  weights = weights / weights.sum(-1, /*keepdim=*/true);
  return {weights * expert_scale.index_select(0, chosen.reshape({-1})).view(chosen.sizes()), chosen};
}

}  // namespace

MoeRoute route_experts(const MoeRouter& r, const torch::Tensor& x, const torch::Tensor& router_w,
                       const torch::Tensor& router_b, const torch::Tensor& score_bias, const torch::Tensor& input_scale,
                       const torch::Tensor& expert_scale) {
  const auto k = r.experts_per_token;
  if (r.routing == MoeRouting::scaled_softmax_topk)
    return scaled_softmax_route(r, x, router_w, input_scale, expert_scale);
  if (r.routing == MoeRouting::sigmoid_grouped || r.routing == MoeRouting::softmax_grouped) {
    // the router in fp32, whatever the model's dtype
    const auto logits = torch::linear(x.to(torch::kFloat32), router_w.to(torch::kFloat32));
    return r.routing == MoeRouting::sigmoid_grouped ? sigmoid_grouped_route(r, logits, score_bias)
                                                    : softmax_grouped_route(r, logits);
  }
  const auto logits = torch::linear(x, router_w, router_b);  // [N, E]
  if (r.routing == MoeRouting::softmax_topk) {
    // transformers' Qwen3MoeTopKRouter (and Qwen3_5Moe's, Qwen3Next's): softmax in fp32, top k, renormalised,
    // back to the logits' dtype.
    auto [weights, chosen] = torch::softmax(logits.to(torch::kFloat32), -1).topk(k, -1);
    if (r.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
    if (!r.routing_weights_fp32) weights = weights.to(logits.scalar_type());
    return {weights, chosen};
  }
  auto [top, idx] = logits.topk(k, -1);
  return {torch::softmax(top, -1), idx};
}

torch::Tensor run_experts(const torch::Tensor& x, const MoeRoute& route, const ExpertWeights& w,
                          const ExpertActivation& a, bool grouped_mm) {
  const auto H = x.size(-1), k = route.chosen.size(-1), E = w.gate_up.size(0);
  // The N k (token, expert) pairs sorted by expert: one contiguous run of rows per expert.
  const auto pairs = route.chosen.reshape({-1});
  const auto order = torch::argsort(pairs, /*stable=*/true);
  const auto sorted_expert = pairs.index_select(0, order);
  const auto xs = x.index_select(0, order.floor_divide(k));
  const auto counts = torch::zeros({E}, pairs.options()).scatter_add_(0, pairs, torch::ones_like(pairs));

  auto gate_up = grouped_linear(xs, counts, w.gate_up, grouped_mm);  // [N k, 2 I]
  if (w.gate_up_b.defined()) gate_up = gate_up + w.gate_up_b.index_select(0, sorted_expert);
  const auto I = gate_up.size(1) / 2;
  auto gate = gate_up.narrow(1, 0, I), up = gate_up.narrow(1, I, I);
  torch::Tensor act;
  if (a.clamped_swiglu) {  // GptOssExperts._apply_gate
    gate = gate.clamp_max(a.swiglu_limit);
    up = up.clamp(-a.swiglu_limit, a.swiglu_limit);
    act = (up + 1) * (gate * torch::sigmoid(gate * a.swiglu_alpha));
  } else if (a.gelu_tanh) {  // Gemma4TextExperts: ACT2FN["gelu_pytorch_tanh"]
    act = torch::gelu(gate, "tanh") * up;
  } else {
    act = torch::silu(gate) * up;
  }
  auto y = grouped_linear(act, counts, w.down, grouped_mm);  // [N k, H]
  if (w.down_b.defined()) y = y + w.down_b.index_select(0, sorted_expert);
  y = (y * route.weights.reshape({-1}).index_select(0, order).unsqueeze(1)).to(x.scalar_type());
  // Back to (token, choice) order, then each token's k outputs summed.
  auto unsorted = torch::empty_like(y).index_copy(0, order, y);
  return unsorted.view({-1, k, H}).sum(1);
}

}  // namespace eagle::model
