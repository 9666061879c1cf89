// One micro-batch through the head, written once and used by the training step and the held-out
// evaluation alike: the loss denominators of a set of batches (host side) and the head's forward
// on the inputs of a feature source (the frozen target, or stored features) under autocast.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/features/source.h"
#include "eagle/head/head.h"

namespace eagle::train {

// The loss denominators [steps] of the batches that share one normalisation (the micro-batches of
// an optimizer step, or all batches of an evaluation): count_loss_positions summed.
std::vector<std::int64_t> loss_denominators(const std::vector<data::Batch>& batches, std::int64_t steps);
// As an fp32 host tensor, ready to be copied into a device buffer.
torch::Tensor denominator_tensor(const std::vector<std::int64_t>& denominators);

// The host counts of one optimizer step over its micro-batches, summed over the ranks as one vector
// (to_vector, from_vector): the loss denominators and the step's real and computed tokens.
struct StepCounts {
  std::vector<std::int64_t> denominators;  // [steps] (loss_denominators)
  std::int64_t real_tokens = 0, computed_tokens = 0;

  static StepCounts of(const std::vector<data::Batch>& micro_batches, std::int64_t steps);
  std::vector<std::int64_t> to_vector() const;
  static StepCounts from_vector(const std::vector<std::int64_t>& values);
};

// head.train_step_forward(features.head_inputs(batch), denominators) under bf16 autocast when bf16.
// Reads only the tensors given, never the host: safe inside a captured CUDA graph.
head::HeadStepOutput forward_micro_batch(const features::FeatureSource& features, head::DraftHead& head,
                                         const features::BatchTensors& batch, const torch::Tensor& denominators,
                                         bool bf16);

// The trainer's step body for one micro-batch: forward_micro_batch, backward (gradients added into
// the parameters' .grad), and the detached loss and metric sums added into loss_sum [] and
// metric_sums [K, kMetricColumns]. Reads only tensors, never the host: what a CUDA graph captures.
void train_micro_batch(const features::FeatureSource& features, head::DraftHead& head,
                       const features::BatchTensors& batch, const torch::Tensor& denominators, bool bf16,
                       torch::Tensor& loss_sum, torch::Tensor& metric_sums);

}  // namespace eagle::train
