// The mixture-of-experts MLP of a head's decoder layer, trainable: the MTP block of Qwen3.5-MoE and
// Qwen3-Next (transformers' Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock, vLLM's
// Qwen3NextSparseMoeBlock) and of DeepSeek-V3 and GLM-4.5 (DeepseekV3MoE / Glm4MoeMoE, vLLM's
// DeepseekV2MoE / Glm4MoE): the router `gate` [E, H], the routed experts as two parameters
// experts.gate_up_proj [E, 2 I, H] (gate rows, then up rows) and experts.down_proj [E, H, I] (the
// layout of transformers 5's experts and of vLLM's fused checkpoint names), and beside them
// Qwen's one shared expert times sigmoid(shared_expert_gate(x)), or DeepSeek's and GLM's ungated
// shared_experts (n_shared_experts x moe_intermediate_size wide). The routing and the experts' sum are
// model/moe.h's, the target's own code, so the head routes every token as the target's sparse layers
// do; gradients reach the router (through the chosen experts' weights) and the chosen experts' rows,
// as in transformers' training forward. DeepSeek's and GLM's e_score_correction_bias (which only
// chooses the experts) is the router's buffer gate.e_score_correction_bias [E] fp32: read from the
// target and written back, never trained.
#pragma once

#include <torch/torch.h>

#include "eagle/head/head.h"
#include "eagle/head/mlp.h"
#include "eagle/model/moe.h"

namespace eagle::head {

struct HeadExpertsImpl : torch::nn::Module {
  HeadExpertsImpl(std::int64_t experts, std::int64_t hidden, std::int64_t intermediate);
  torch::Tensor gate_up_proj, down_proj;  // [E, 2 I, H], [E, H, I]
};
TORCH_MODULE(HeadExperts);

struct HeadMoeImpl : torch::nn::Module {
  explicit HeadMoeImpl(const HeadConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // [.., H] -> [.., H]
  torch::nn::Linear gate{nullptr};                // the router [E, H], no bias
  torch::Tensor score_bias;                       // sigmoid_grouped: gate.e_score_correction_bias [E] fp32
  HeadExperts experts{nullptr};
  // shared_intermediate_size wide: Qwen's "shared_expert" (softmax_topk), DeepSeek's and GLM's
  // "shared_experts" (sigmoid_grouped)
  HeadMlp shared_expert{nullptr};
  torch::nn::Linear shared_expert_gate{nullptr};  // [1, H] (cfg.shared_expert_gate), else null
  model::MoeRouter router;
};
TORCH_MODULE(HeadMoe);

// The name of a head's MoE buffer that its checkpoint holds (the router's e_score_correction_bias).
bool is_checkpoint_buffer(const std::string& name);

}  // namespace eagle::head
