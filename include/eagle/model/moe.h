// Mixture-of-experts routing and the routed experts' forward, shared by the targets' sparse layers
// (target_moe.cpp) and the trainable MoE block of an MTP head (head/moe.h), so that both route
// every token bit for bit alike: the routers of transformers' Qwen3-MoE, Mixtral, gpt-oss,
// DeepSeek-V2, DeepSeek-V3 / GLM-4.5 and Gemma 4 modules, then the tokens sorted by expert through grouped matmuls.
// Both are differentiable (the head trains its router and experts through them).
#pragma once

#include <cstdint>
#include <utility>

#include <torch/torch.h>

namespace eagle::model {

// How a mixture-of-experts layer weighs its experts.
enum class MoeRouting {
  softmax_topk,  // Qwen3-MoE, Mixtral, Qwen3-Next, Qwen3.5-MoE: softmax over all experts in fp32, the k
                 // largest (renormalised over the k when norm_topk_prob)
  topk_softmax,  // gpt-oss: the k largest logits (router with bias), softmax over those k
  // DeepSeek-V3, GLM-4.5: fp32 sigmoid scores; the choice from scores + e_score_correction_bias within the
  // topk_group best of n_group groups (a group's score: its two best); weights the chosen raw scores
  // (renormalised when norm_topk_prob) times routed_scaling_factor, kept in fp32
  sigmoid_grouped,
  // DeepSeek-V2 (DeepseekV2TopkRouter): fp32 softmax over all experts; with n_group > 1
  // (group_limited_greedy) only the topk_group groups of the largest single score stay (the others' scores
  // zeroed); the k largest scores, never renormalised, times routed_scaling_factor, kept in fp32
  softmax_grouped,
  // Gemma 4 (Gemma4TextRouter): the router's input RMS-normed without a weight (eps input_norm_eps), times its
  // learned scale [H] and hidden_size^-1/2, then softmax_topk's fp32 softmax and top k, always renormalised, each
  // chosen weight then times its expert's learned per_expert_scale [E]; kept in fp32
  scaled_softmax_topk,
};

// A router's rule and sizes (TargetConfig::moe_router, HeadConfig::moe_router).
struct MoeRouter {
  MoeRouting routing = MoeRouting::softmax_topk;
  std::int64_t num_experts = 0, experts_per_token = 0;  // num_experts 0: no mixture of experts
  bool norm_topk_prob = true;                           // renormalise the chosen k weights
  bool routing_weights_fp32 = false;         // softmax_topk: weights kept fp32 (Mixtral), else the logits' dtype
  std::int64_t n_group = 1, topk_group = 1;  // sigmoid_grouped, softmax_grouped (1 of 1: greedy)
  double routed_scaling_factor = 1.0;        // sigmoid_grouped, softmax_grouped
  double input_norm_eps = 1e-6;              // scaled_softmax_topk: the RMSNorm of the router's input
};

// Each token's k experts and their weights, [N, k] each (chosen int64).
struct MoeRoute {
  torch::Tensor weights, chosen;
};

// The routing of tokens x [N, H] by the router weight [E, H] (router_b [E] or undefined: gpt-oss's
// bias; score_bias [E] fp32 or undefined: sigmoid_grouped's e_score_correction_bias; input_scale [H] and
// expert_scale [E]: scaled_softmax_topk's scale and per_expert_scale, which it requires). sigmoid_grouped and
// softmax_grouped compute their logits in fp32 whatever x's dtype. Device work only (no host synchronisation).
MoeRoute route_experts(const MoeRouter& r, const torch::Tensor& x, const torch::Tensor& router_w,
                       const torch::Tensor& router_b = {}, const torch::Tensor& score_bias = {},
                       const torch::Tensor& input_scale = {}, const torch::Tensor& expert_scale = {});

// The routed experts' weights: gate rows then up rows [E, 2 I, H] (transformers 5's experts.gate_up_proj),
// down [E, H, I]; the biases [E, 2 I], [E, H] or undefined (gpt-oss).
struct ExpertWeights {
  torch::Tensor gate_up, gate_up_b, down, down_b;
};

// The experts' activation: SiLU(gate) * up, GELU(gate) * up with GELU's tanh approximation (Gemma 4's
// gelu_pytorch_tanh), or gpt-oss's clamped (up + 1) * gate * sigmoid(alpha * gate).
struct ExpertActivation {
  bool clamped_swiglu = false;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
  bool gelu_tanh = false;  // after the gpt-oss fields: target_moe.cpp initialises those three in order
};

// The weighted sum of each token's k experts [N, H] in x's dtype, x [N, H]. grouped_mm: at::_grouped_mm
// where it runs (fp32 on CPU, bf16 on CUDA from sm90; device-side offsets); false, or where it does not
// run, one matmul per expert with rows (the counts read on the host). torch 2.11's _grouped_mm has no
// working CPU backward: a trained module passes false.
torch::Tensor run_experts(const torch::Tensor& x, const MoeRoute& route, const ExpertWeights& w,
                          const ExpertActivation& act = {}, bool grouped_mm = true);

}  // namespace eagle::model
