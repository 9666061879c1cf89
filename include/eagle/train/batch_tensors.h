// Turns a plain-C++ Batch into device tensors: either fresh ones, or copied into fixed buffers of
// the batch's shape (what a captured CUDA graph reads).
#pragma once

#include <torch/torch.h>

#include "eagle/data/batch.h"

namespace eagle::train {

struct BatchTensors {
  torch::Tensor input_ids;     // [B, T] int64
  torch::Tensor position_ids;  // [B, T] int64
  torch::Tensor document_ids;  // [B, T] int64, -1 padding
  torch::Tensor loss_mask;     // [B, T] bool
  // Stored target features of the batch (offline training, feature_source.h); undefined online.
  torch::Tensor aux_hidden;     // [B, T, aux_width] in the store's dtype; padding 0
  torch::Tensor last_hidden;    // [B, T, H] in the store's dtype; padding 0
  torch::Tensor target_argmax;  // [B, T] int64 when stored; padding 0
};

// Allocates device buffers of the batch's shape.
BatchTensors allocate_like(const data::Batch& batch, torch::Device device);
// Copies the batch into buffers of the same shape without synchronising the host.
void copy_into(const data::Batch& batch, BatchTensors& buffers);

}  // namespace eagle::train
