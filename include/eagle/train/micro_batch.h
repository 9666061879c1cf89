// One micro-batch through the head, written once and used by the training step and the held-out
// evaluation alike: the loss denominators of a set of batches (host side) and the head's forward
// on the inputs of a feature source (the frozen target, or stored features) under autocast.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/features/source.h"
#include "eagle/head/head.h"

namespace eagle::train {

// Loss denominators (a head::LossPlan's) as an fp32 host tensor, ready to be copied into a device buffer.
torch::Tensor denominator_tensor(const std::vector<std::int64_t>& denominators);

// The host counts of one optimizer step over its micro-batches, summed over the ranks as one vector
// (to_vector, from_vector): the loss denominators and the step's real and computed tokens.
struct StepCounts {
  std::vector<std::int64_t> denominators;  // [steps] (the head row's loss plan)
  std::int64_t real_tokens = 0, computed_tokens = 0;

  // denominators: the step's loss plan's (head::DraftSpec::loss_plan).
  static StepCounts of(const std::vector<data::Batch>& micro_batches, std::vector<std::int64_t> denominators);
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

// The micro-batches of training steps on fixed device buffers, one set per batch shape (what the
// captured graph of that shape reads): a batch is filled from the source and its step's
// denominators copied without synchronising, then train_micro_batch runs through `graphs` under
// the batch's shape. The trainer's step and the step benchmark (scripts/bench/bench_step.cpp) both.
class MicroBatchRunner {
 public:
  MicroBatchRunner(const features::FeatureSource& source, head::DraftHead& head, std::int64_t max_segments, bool bf16)
      : source_(source), head_(head), max_segments_(max_segments), bf16_(bf16) {}
  // denominators: [K] fp32 on the host (denominator_tensor); loss_sum, metric_sums: train_micro_batch's.
  // extra: the loss plan's extra host input of the batch (a DFlash head's anchors [B, N]), copied into
  // the shape's buffer (its size fixed per shape: DFlash's N is min(dflash_num_anchors, length));
  // undefined for heads without one.
  void run(device::CudaGraphCache& graphs, const data::Batch& batch, const torch::Tensor& denominators,
           torch::Tensor& loss_sum, torch::Tensor& metric_sums, const torch::Tensor& extra = {});

 private:
  struct ShapeBuffers {
    features::BatchTensors batch;
    torch::Tensor denominators;  // [K] fp32
  };
  const features::FeatureSource& source_;
  head::DraftHead& head_;
  std::int64_t max_segments_;  // packed rows: document runs per row at most (0: not packed)
  bool bf16_;
  std::map<data::Shape, ShapeBuffers> buffers_;
};

}  // namespace eagle::train
