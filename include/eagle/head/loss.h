// The device-side pieces of the draft heads' losses and metrics (EAGLE.md "Which positions count",
// "Loss", "Metrics"): shifted views, the valid-position mask, the soft cross-entropy and one row of
// metric sums. They never synchronise with the host, so a training step built from them can be
// captured as a CUDA graph. The host-side counts over a batch live in train/loss_metrics.h.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace eagle::head {

// The per-position loss of a draft distribution q against the teacher's p (docs/training.md
// "Losses"): kl, the soft cross-entropy -sum p log q (forward KL up to the teacher's entropy, today's
// default); tv, the total variation 1 - sum min(p, q); lk_hybrid, lambda KL(p||q) + (1 - lambda) TV
// with lambda = exp(-kLkEta * alpha) per position, alpha = sum min(p, q) not differentiated
// (vllm-project/speculators' lk_hybrid_loss, Samarin et al. 2026).
enum class LossKind { kl, tv, lk_hybrid };
inline constexpr double kLkEta = 3.0;
// "kl", "tv", "lk_hybrid"; parse_loss_kind throws Error(input) naming the option otherwise.
std::string loss_name(LossKind kind);
LossKind parse_loss_kind(const std::string& name);

// x [B, T, ...] shifted left by n along dim 1 (x'[t] = x[t+n]), the last n entries set to fill.
torch::Tensor shift_left(const torch::Tensor& x, std::int64_t n, double fill);

// [B, T] bool, the first two conditions at step k: document_ids[t+k+2] == document_ids[t] >= 0
// and loss_mask[t+k+2] != 0. Documents are contiguous runs within a row, so equal ids at both ends
// mean the chain stays inside one sample.
torch::Tensor in_document_mask(const torch::Tensor& loss_mask, const torch::Tensor& document_ids, std::int64_t step);

// Per-position soft cross-entropy -sum_v p_v log softmax(logits)_v, [.., V] -> [..], in fp32.
torch::Tensor soft_cross_entropy(const torch::Tensor& logits, const torch::Tensor& teacher_probs);

// The per-position loss of a kind, [.., V] -> [..] in fp32, through autograd over the whole row (the
// unchunked reference of head/fused_loss.h).
torch::Tensor position_loss(LossKind kind, const torch::Tensor& logits, const torch::Tensor& teacher_probs);

// Columns of the metric sums tensor [K, kMetricColumns] (raw sums and counts, they add across
// batches and ranks).
enum MetricColumn : std::int64_t {
  kValid = 0,        // positions valid at step k (full rule)
  kCorrect = 1,      // ... whose draft argmax (as a target id) equals the target's argmax
  kCondValid = 2,    // ... valid at step k with steps 0..k-1 valid and right at the same position
  kCondCorrect = 3,  // ... and right at step k
  kLossSum = 4,      // unweighted loss summed over the valid positions of step k
  kMetricColumns = 5,
};

// One step's row of metric sums from device tensors: valid [B, T] bool, correct [B, T] bool,
// prefix_ok [B, T] bool (steps 0..k-1 valid and right), per-position loss [B, T] float.
torch::Tensor metric_row(const torch::Tensor& valid, const torch::Tensor& correct, const torch::Tensor& prefix_ok,
                         const torch::Tensor& position_loss);

}  // namespace eagle::head
