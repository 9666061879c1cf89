// One TTT step's output layer, loss and argmax fused and chunked over tokens (docs/training.md "Long
// context"): the final-normed hidden o goes through the LM head chunk by chunk, each chunk's logits,
// teacher distribution, loss, argmax and (when autograd will need them) the loss's gradients with
// respect to o and the LM head made and dropped before the next chunk, so no [tokens, V_d] tensor
// lives beyond one chunk and the backward pass only scales the gradients made in the forward (the
// LM head's matmuls are those of the unfused path: no logits are made again). Shapes are fixed by the inputs and
// nothing synchronises with the host, so it runs inside a captured CUDA graph; under autocast the logits are made in
// the autocast dtype, as the LM head's nn::Linear makes them.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "eagle/head/loss.h"

namespace eagle::head {

struct StepLossOutput {
  torch::Tensor weighted;       // scalar fp32 with autograd: scale * sum over valid t of loss[t]
  torch::Tensor position_loss;  // [B, T] fp32, detached; meaningful where valid
  torch::Tensor argmax;         // [B, T] int64, the draft index of the largest draft logit
};

// o [B, T, H] the final-normed hidden, weight [V_d, H] the LM head, teacher_logits [B, T, V_d] (the
// teacher of position t is row t + shift of its row, softmaxed over V_d), valid [B, T] bool, scale a
// 0-dim fp32 tensor (the step's decay over its denominator). chunk tokens per chunk (over B * T);
// 0: the unchunked autograd path (one [B, T, V_d] logits tensor, the reference).
//
// head_sum (chunked path only): the steps of one unroll share one fp32 [V_d, H] sum of their LM-head
// gradients instead of keeping one each. Valid only when the steps' `weighted` losses reach the
// backward pass with one upstream gradient (they are added into one loss, as the heads' unrolls do);
// the first step's backward to run returns the sum, the others none.
struct StepLossSum {
  torch::Tensor sum;      // [V_d, H] fp32, made by the first step
  torch::Tensor claimed;  // CPU int8 [1]: set by the backward that returned the sum
};
StepLossOutput step_loss(LossKind kind, const torch::Tensor& o, const torch::Tensor& weight,
                         const torch::Tensor& teacher_logits, std::int64_t shift, const torch::Tensor& valid,
                         const torch::Tensor& scale, std::int64_t chunk, StepLossSum* head_sum = nullptr);

}  // namespace eagle::head
