// The dense SwiGLU MLP of a head's decoder layer (mlp.{gate,up,down}_proj, no bias), also a MoE
// block's shared expert (head_moe.h).
#pragma once

#include <torch/torch.h>

#include "eagle/head/head.h"
#include "eagle/model/layers.h"

namespace eagle::head {

struct HeadMlpImpl : torch::nn::Module {
  // intermediate_size 0: cfg.intermediate_size (a MoE block's shared expert passes its own width).
  explicit HeadMlpImpl(const HeadConfig& cfg, std::int64_t intermediate_size = 0);
  torch::Tensor forward(const torch::Tensor& x) {
    return model::swiglu(x, gate_proj->weight, up_proj->weight, down_proj->weight);
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(HeadMlp);

}  // namespace eagle::head
