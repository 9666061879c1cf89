// Attention of one training-time-test step (EAGLE.md "Training-time test"): each query t attends
// the step-0 keys s <= t of its own document plus the keys of steps 1..k at the same position t,
// in one softmax. Two implementations with equal values and gradients: a per-step reference that
// materialises the probabilities (autograd keeps B x heads x T x (T+k) per step), and an efficient
// one: the step-0 block is attention with its log-sum-exp (model/attention.h: flash kernels that
// skip padding and other documents, or a chunked recomputation), and the k diagonal keys are merged
// into its softmax by autograd ops of size B x heads x T x k. The diagonal keys are passed as a
// list of the steps' own tensors, so nothing of size k x T is copied per step.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/model/attention.h"

namespace eagle::head {

enum class TttAttentionImpl { reference, efficient };

// q [B, h, T, d]; k0, v0 [B, kv_heads, T, d] the step-0 keys and values (kv_heads divides h; not
// repeated); kd, vd: k tensors [B, kv_heads, T, d], the keys and values of steps 1..k at each
// position (empty at step 0); layout: the batch's documents (padding attends padding, so no row is
// empty). Returns [B, h, T, d] in q's dtype.
torch::Tensor ttt_attention_reference(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const model::AttentionLayout& layout, double scale);

torch::Tensor ttt_attention_efficient(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const model::AttentionLayout& layout, double scale);

torch::Tensor ttt_attention(TttAttentionImpl impl, const torch::Tensor& q, const torch::Tensor& k0,
                            const torch::Tensor& v0, const std::vector<torch::Tensor>& kd,
                            const std::vector<torch::Tensor>& vd, const model::AttentionLayout& layout, double scale);

}  // namespace eagle::head
