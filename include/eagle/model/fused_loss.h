// One TTT step's output layer, loss and argmax fused and chunked over tokens (docs/training.md "Long
// context"): the final-normed hidden o goes through the LM head chunk by chunk, each chunk's logits,
// teacher distribution, loss and argmax made and dropped before the next; the backward pass computes
// the chunk's logits again for the gradients of o and of the LM head, so no [tokens, V_d] tensor
// lives beyond one chunk. Shapes are fixed by the inputs and nothing synchronises with the host, so
// it runs inside a captured CUDA graph; under autocast the logits are made in the autocast dtype, as
// the LM head's nn::Linear makes them.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "eagle/model/head_loss.h"

namespace eagle::model {

struct StepLossOutput {
  torch::Tensor weighted;       // scalar fp32 with autograd: scale * sum over valid t of loss[t]
  torch::Tensor position_loss;  // [B, T] fp32, detached; meaningful where valid
  torch::Tensor argmax;         // [B, T] int64, the draft index of the largest draft logit
};

// o [B, T, H] the final-normed hidden, weight [V_d, H] the LM head, teacher_logits [B, T, V_d] (the
// teacher of position t is row t + shift of its row, softmaxed over V_d), valid [B, T] bool, scale a
// 0-dim fp32 tensor (the step's decay over its denominator). chunk tokens per chunk (over B * T);
// 0: the unchunked autograd path (one [B, T, V_d] logits tensor, the reference).
StepLossOutput step_loss(LossKind kind, const torch::Tensor& o, const torch::Tensor& weight,
                         const torch::Tensor& teacher_logits, std::int64_t shift, const torch::Tensor& valid,
                         const torch::Tensor& scale, std::int64_t chunk);

}  // namespace eagle::model
