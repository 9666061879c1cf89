// Losses, valid-position masks and acceptance metrics of the draft heads (EAGLE.md "Which positions
// count", "Loss", "Metrics"). Device functions never synchronise with the host, so a training step
// built from them can be captured as a CUDA graph.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/batch.h"

namespace eagle::train {

// Host side, before the step: for k = 0..steps-1, the positions t of the batch with t+k+2 in the
// same document as t and loss_mask[t+k+2] = 1. The trainer sums these over the micro-batches (and
// ranks) of one optimizer step and passes them as the loss denominators. The third condition of
// the rule (teacher argmax in the draft vocabulary) is only known on the device: positions failing
// it add nothing to the numerator but still count here (docs/heads.md).
std::vector<std::int64_t> count_loss_positions(const data::Batch& batch, std::int64_t steps);

// x [B, T] shifted left by n along dim 1 (x'[t] = x[t+n]), the last n entries set to fill.
torch::Tensor shift_left(const torch::Tensor& x, std::int64_t n, double fill);

// [B, T] bool, the first two conditions at step k: document_ids[t+k+2] == document_ids[t] >= 0
// and loss_mask[t+k+2] != 0. Documents are contiguous runs within a row, so equal ids at both ends
// mean the chain stays inside one sample.
torch::Tensor in_document_mask(const torch::Tensor& loss_mask, const torch::Tensor& document_ids, std::int64_t step);

// Per-position soft cross-entropy -sum_v p_v log softmax(logits)_v, [.., V] -> [..], in fp32.
torch::Tensor soft_cross_entropy(const torch::Tensor& logits, const torch::Tensor& teacher_probs);

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

struct MetricSummary {
  std::vector<double> acc, cacc, loss;  // per step: acc_k, cacc_k, mean loss over valid positions
  double tau = 1.0;                     // 1 + sum_k prod_{j<=k} cacc_j
  std::int64_t positions = 0;           // valid positions at step 0
};

// Host side: reads summed metric tensors (one host copy), ratios with empty denominators give 0.
MetricSummary summarize_metrics(const torch::Tensor& sums);

}  // namespace eagle::train
