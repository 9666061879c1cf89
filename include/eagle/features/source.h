// Where a micro-batch's head inputs come from: the frozen target run on the batch (online), or
// target features stored on disk (offline, --features_path: docs/offline.md). Both fill fixed
// per-shape buffers before the step (host work and asynchronous copies) and compute the head's
// inputs from them inside it (device work only), so the step can be captured as a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/data/sampler.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/features/store.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::features {

class FeatureSource {
 public:
  virtual ~FeatureSource() = default;
  // Where the buffers and the head's inputs live.
  virtual torch::Device device() const = 0;
  // New buffers of the batch's shape on the device; max_segments: the bound on document runs per
  // packed row (model::AttentionSpec; 0: the row length).
  virtual BatchTensors allocate(const data::Batch& batch, std::int64_t max_segments) const = 0;
  // Copies the batch, and offline its stored features, into buffers of its shape without
  // synchronising the device.
  virtual void fill(const data::Batch& batch, BatchTensors& buffers) const = 0;
  // The head's inputs from the buffers (no gradients flow into them); never reads the host.
  virtual head::HeadInputs head_inputs(const BatchTensors& buffers) const = 0;
  // Before the first fill: the batches of the next `batches` draws of `sampler` (over this source's
  // dataset) will be read in that order. A no-op but for a store that fetches ahead (a target server:
  // FeatureStore::prefetch).
  virtual void prefetch(const data::Sampler& sampler, std::int64_t batches) const {}
};

// The target's forward on every batch, with the teacher it computes for the head.
std::unique_ptr<FeatureSource> online_features(const target::TargetModel& target, const target::TeacherSpec& teacher);

// Where an offline head's aux feature comes from: the store's aux features (EAGLE-3), or, for an MTP
// head (--draft mtp), the stored last hidden state as its one aux feature (id L, the step-1 state): as
// stored before the target's final norm (MiMo's step 1; the store must hold it so) or after that norm
// (the Qwen families: the stored state itself, or the final norm applied to a pre-norm one). The store's
// aux features are then not read.
enum class LastAsAux { none, pre_norm, post_norm };

// Stored features of a dataset's samples: sample i of the dataset is the store's samples[i]. The
// teacher comes from the stored last hidden state: the target's final norm when it was stored
// before it, then the LM head rows of the draft ids (and, when the store has no argmax, the whole
// LM head in chunks for the full-vocabulary argmax), computed in the ends' dtype on `device`.
std::unique_ptr<FeatureSource> offline_features(std::shared_ptr<const FeatureStore> store,
                                                std::vector<std::int64_t> samples, const target::TargetEnds& ends,
                                                const target::TeacherSpec& teacher, torch::Device device,
                                                LastAsAux last_as_aux = LastAsAux::none);

}  // namespace eagle::features
