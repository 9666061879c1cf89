// Attention of one training-time-test step (EAGLE.md "Training-time test"): each query t attends
// the step-0 keys s <= t of its own document plus the keys of steps 1..k at the same position t,
// in one softmax. Two implementations with equal values and gradients: a per-step reference that
// materialises the probabilities (autograd keeps B x heads x T x (T+k) per step), and an efficient
// one that keeps only the inputs, the output and the log-sum-exp per query and recomputes the
// probabilities chunk by chunk in its backward pass. The diagonal keys are passed as a list of the
// steps' own tensors, so nothing of size k x T is copied per step.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace eagle::model {

enum class TttAttentionImpl { reference, efficient };

// q [B, h, T, d]; k0, v0 [B, h, T, d] the step-0 keys and values (kv heads already repeated);
// kd, vd: k tensors [B, h, T, d], the keys and values of steps 1..k at each position (empty at
// step 0); document_ids [B, T] int64 (-1: padding, which attends padding so no row is empty).
// Returns [B, h, T, d] in q's dtype.
torch::Tensor ttt_attention_reference(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const torch::Tensor& document_ids, double scale);

// query_chunk: queries per block of the recomputation (bounds the transient memory to
// B x h x query_chunk x T scores).
torch::Tensor ttt_attention_efficient(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const torch::Tensor& document_ids, double scale,
                                      std::int64_t query_chunk = 256);

torch::Tensor ttt_attention(TttAttentionImpl impl, const torch::Tensor& q, const torch::Tensor& k0,
                            const torch::Tensor& v0, const std::vector<torch::Tensor>& kd,
                            const std::vector<torch::Tensor>& vd, const torch::Tensor& document_ids, double scale);

// [B, 1, Tq, Tk] bool: key s is visible to query t0 + i (s <= t0 + i and the same document id).
torch::Tensor document_causal_mask(const torch::Tensor& document_ids, std::int64_t t0, std::int64_t tq,
                                   std::int64_t tk);

}  // namespace eagle::model
