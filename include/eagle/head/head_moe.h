// The mixture-of-experts MLP of a head's decoder layer, trainable: the MTP block of Qwen3.5-MoE and
// Qwen3-Next (transformers' Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock, vLLM's
// Qwen3NextSparseMoeBlock): the router `gate` [E, H], the routed experts as two parameters
// experts.gate_up_proj [E, 2 I, H] (gate rows, then up rows) and experts.down_proj [E, H, I] (the
// layout of transformers 5's experts and of vLLM's fused checkpoint names), and one shared expert times
// sigmoid(shared_expert_gate(x)). The routing and the experts' sum are model/moe.h's, the target's own
// code, so the head routes every token as the target's sparse layers do; gradients reach the router
// (through the chosen experts' softmax weights) and the chosen experts' rows, as in transformers'
// training forward. Other routers (DeepSeek-V3's, GLM's sigmoid grouped routing with shared_experts)
// go through the same route_experts; their block names are not built here yet.
#pragma once

#include <torch/torch.h>

#include "eagle/head/head.h"
#include "eagle/head/head_mlp.h"
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
  HeadExperts experts{nullptr};
  HeadMlp shared_expert{nullptr};                 // shared_intermediate_size wide
  torch::nn::Linear shared_expert_gate{nullptr};  // [1, H] (cfg.shared_expert_gate), else null
  model::MoeRouter router;
};
TORCH_MODULE(HeadMoe);

}  // namespace eagle::head
