// One micro-batch as plain C++ arrays (row-major, rows x length), produced by the sampler and
// turned into tensors by the trainer. Padded batches hold one sample per row; packed
// (padding-free) batches hold several samples per row, told apart by document_ids.
#pragma once

#include <cstdint>
#include <vector>

namespace eagle::data {

struct Batch {
  std::int64_t rows = 0;
  std::int64_t length = 0;                 // padded length of every row (the bucket length)
  std::vector<std::int32_t> input_ids;     // rows*length; padding holds 0
  std::vector<std::uint8_t> loss_mask;     // rows*length; 1: a trained token; padding 0
  std::vector<std::int32_t> position_ids;  // rows*length; position within its own sample; padding 0
  // rows*length; which sample of the row a token belongs to (0, 1, ... within the row); -1: padding.
  // Token i attends token j iff same row, document_ids equal and >= 0, and j <= i.
  std::vector<std::int32_t> document_ids;
  std::vector<std::int64_t> sample_indices;  // dataset indices of the samples, in row order
  std::int64_t real_tokens = 0;              // non-padding tokens
  // Padding-free (a run's SamplerOptions.padding_free): rows may hold several samples, so attention
  // must stay within each; false: one sample per row, then padding (causal attention is exact).
  bool packed = false;

  std::int64_t computed_tokens() const { return rows * length; }
  std::int64_t at(std::int64_t row, std::int64_t pos) const { return row * length + pos; }
  // The most runs of equal document ids in a row (its samples, plus one for trailing padding).
  std::int64_t max_segments_per_row() const;
};

}  // namespace eagle::data
