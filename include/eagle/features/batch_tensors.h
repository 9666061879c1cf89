// Turns a plain-C++ Batch into device tensors: either fresh ones, or copied into fixed buffers of
// the batch's shape (what a captured CUDA graph reads).
#pragma once

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/model/attention.h"

namespace eagle::features {

struct BatchTensors {
  torch::Tensor input_ids;     // [B, T] int64
  torch::Tensor position_ids;  // [B, T] int64
  torch::Tensor document_ids;  // [B, T] int64, -1 padding
  torch::Tensor loss_mask;     // [B, T] bool
  model::AttentionSpec attention{};  // padded or packed rows (host values, fixed for the buffers)
  // Stored target features of the batch (offline training, source.h); undefined online.
  torch::Tensor aux_hidden;     // [B, T, aux_width] in the store's dtype; padding 0
  torch::Tensor last_hidden;    // [B, T, H] in the store's dtype; padding 0
  torch::Tensor target_argmax;  // [B, T] int64 when stored; padding 0
  // The loss plan's extra head input of the batch (head::LossPlan: a DFlash head's block anchors [B, N]
  // int64), filled by the trainer, not by a source; undefined for heads without one.
  torch::Tensor extra;
};

// Allocates device buffers of the batch's shape. max_segments: the static bound on runs of equal
// document ids per packed row (data::max_segments_per_row of the run's lengths; 0: the row length).
BatchTensors allocate_like(const data::Batch& batch, torch::Device device, std::int64_t max_segments = 0);
// Copies the batch into buffers of the same shape without synchronising the host; refuses a batch
// whose layout the buffers were not made for (padded vs packed, more segments than the bound).
void copy_into(const data::Batch& batch, BatchTensors& buffers);

}  // namespace eagle::features
