// Batch planning over sample lengths only: bucket lengths, length-grouped and token-budget batches,
// padding-free packing, and the split of each global batch between data-parallel ranks. Plain C++,
// deterministic for a seed; the Sampler (sampler.h) walks these plans epoch after epoch.
#pragma once

#include <compare>
#include <cstdint>
#include <iosfwd>
#include <vector>

namespace eagle::config {
struct Options;
}

namespace eagle::data {

struct SamplerOptions {
  std::int64_t training_seq_len = 2048;         // tokens; longest possible row
  std::int64_t bucket_granularity = 128;        // tokens; 0: every batch is training_seq_len long
  std::vector<std::int64_t> bucket_boundaries;  // tokens, increasing; overrides the granularity
  bool group_by_length = true;                  // sort by length within a window of batches
  bool padding_free = false;                    // pack several samples per row
  std::int64_t max_tokens_per_batch = 0;        // rows*length per rank; 0: a fixed number of rows
  std::int64_t rows = 4;                        // rows per micro-batch and rank (fixed-rows mode)
  std::uint64_t seed = 42;
  std::int64_t num_ranks = 1;                   // data-parallel ranks sharing each global batch
  std::int64_t rank = 0;                        // this process's rank
  std::int64_t window_batches = 64;             // global batches per grouping/packing window

  // The batching options of a run, for `num_ranks` ranks of which this is `rank`.
  static SamplerOptions from(const config::Options& o, std::int64_t num_ranks = 1, std::int64_t rank = 0);
  // Checks what the option table cannot (rank, window); the user's options are checked there.
  void validate() const;
};

// One micro-batch of one rank, before any token is read: which samples go in which row.
struct BatchPlan {
  std::int64_t rows = 0;
  std::int64_t length = 0;  // padded row length, one of bucket_lengths()
  // rows entries, each the dataset indices of the samples of that row in order (one sample per
  // row unless padding-free); an empty row is all padding.
  std::vector<std::vector<std::int64_t>> row_samples;
  bool packed = false;  // planned padding-free (rows may hold several samples)

  std::int64_t computed_tokens() const { return rows * length; }
  std::int64_t real_tokens(const std::vector<std::int64_t>& lengths) const;
  bool operator==(const BatchPlan&) const = default;
};

struct Shape {
  std::int64_t rows = 0, length = 0;
  auto operator<=>(const Shape&) const = default;
};

// "2x256 [[5], [1]]" and "2x256", for test messages and logs.
std::ostream& operator<<(std::ostream& os, const BatchPlan& p);
std::ostream& operator<<(std::ostream& os, const Shape& s);

// Every length a row can be padded to, increasing; the last one is training_seq_len.
std::vector<std::int64_t> bucket_lengths(const SamplerOptions& o);
// The smallest bucket length >= longest (throws when longest > training_seq_len).
std::int64_t bucket_length(const SamplerOptions& o, std::int64_t longest);
// Rows per rank of a batch padded to `length`: fixed, or as many as the token budget allows.
std::int64_t rows_for_length(const SamplerOptions& o, std::int64_t length);
// Rows per rank of a padding-free batch: each row is training_seq_len long, so the token budget
// (or the fixed rows) decides.
std::int64_t packed_rows(const SamplerOptions& o);
// Every (rows, length) a batch can have, known before training (one CUDA graph per shape).
std::vector<Shape> possible_shapes(const SamplerOptions& o);
// The most runs of equal document ids a packed row of row_length tokens can hold over any epoch:
// as many of the shortest samples as fit, plus one padding run (a static bound on the segments of
// variable-length attention, known before training).
std::int64_t max_segments_per_row(const std::vector<std::int64_t>& lengths, std::int64_t row_length);

// First-fit-decreasing: packs the samples (dataset indices with their lengths) into rows of
// `capacity` tokens. Samples are placed longest first (ties: the given order) into the first row
// with room; rows are returned in the order they were opened.
std::vector<std::vector<std::int64_t>> pack_first_fit_decreasing(const std::vector<std::int64_t>& samples,
                                                                 const std::vector<std::int64_t>& lengths,
                                                                 std::int64_t capacity);

// One pass over samples [first, first + count) longest first (ties: index order), without shuffling
// or ranks: each batch padded to the bucket of its longest sample with as many rows as that length
// allows, the last batch of a length filled up with empty rows (so each length has one shape).
// What dump-features runs the target on.
std::vector<BatchPlan> plan_sorted(const std::vector<std::int64_t>& lengths, std::int64_t first, std::int64_t count,
                                   const SamplerOptions& o);

// The plans of one epoch for all ranks: result[step][rank]. Every rank gets the same number of
// batches, every sample of the epoch appears exactly once, the plan is a function of (lengths,
// options, epoch) only.
using EpochPlan = std::vector<std::vector<BatchPlan>>;
EpochPlan plan_epoch(const std::vector<std::int64_t>& lengths, const SamplerOptions& o, std::int64_t epoch);

}  // namespace eagle::data
