// The sampler: yields this rank's batch plans epoch after epoch, lists every batch shape before
// training, saves and restores its position for exact resume, and turns a plan into a Batch.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <vector>

#include "eagle/data/batch.h"
#include "eagle/data/dataset.h"
#include "eagle/data/plan.h"

namespace eagle::data {

class Sampler {
 public:
  // lengths: the token count of every sample (already truncated to training_seq_len).
  Sampler(std::vector<std::int64_t> lengths, SamplerOptions options);

  // This rank's next batch; after the last batch of an epoch the next epoch begins.
  BatchPlan next();
  std::int64_t epoch() const { return epoch_; }
  std::int64_t position() const { return index_; }  // batches of the current epoch already yielded
  // Batches per rank in epoch e (equal on every rank; may differ slightly between epochs with a
  // token budget or packing, since the shuffle changes how samples combine).
  std::int64_t batches_in_epoch(std::int64_t e);
  // Every (rows, length) a batch of this sampler can have.
  std::vector<Shape> shapes() const { return possible_shapes(options_); }
  // How many of this rank's batches in epoch e have each shape (the shapes worth a CUDA graph).
  std::map<Shape, std::int64_t> shape_counts(std::int64_t e);
  const SamplerOptions& options() const { return options_; }
  const std::vector<std::int64_t>& lengths() const { return lengths_; }

  // The position as JSON: epoch and batch index, plus what must match on restore (seed, batching
  // options, number of ranks, a fingerprint of the lengths). The order of epoch e is a function of
  // (seed, e), so no generator state needs saving.
  nlohmann::json state() const;
  // Continues from a saved state; throws eagle::Error (input) naming the first field that differs.
  void restore(const nlohmann::json& state);

 private:
  const std::vector<BatchPlan>& plans_of(std::int64_t e);

  std::vector<std::int64_t> lengths_;
  SamplerOptions options_;
  std::uint64_t fingerprint_ = 0;
  std::int64_t epoch_ = 0, index_ = 0;
  std::int64_t cached_epoch_ = -1;
  std::vector<BatchPlan> cached_;  // this rank's plans of cached_epoch_
};

// The batch of a plan: rows x length arrays, samples of a row back to back, positions counted within
// each sample, document ids numbering the samples of a row, padding after them. Throws eagle::Error
// (input) when the plan does not fit the dataset (an index out of range, or a row's samples longer
// than the plan's length: the dataset changed since planning).
Batch make_batch(const Dataset& dataset, const BatchPlan& plan);

// The optimizer steps of a run: max_steps, else num_train_epochs (fractions included) of this
// sampler's batches over gradient_accumulation_steps; Error(usage) when that is none.
std::int64_t planned_steps(const config::Options& o, Sampler& sampler);

// FNV-1a over the lengths: detects a different dataset on restore.
std::uint64_t lengths_fingerprint(const std::vector<std::int64_t>& lengths);

}  // namespace eagle::data
