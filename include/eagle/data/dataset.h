// A pretokenized dataset: samples of token ids with a per-token loss mask, stored flat (tokens as
// uint16 or uint32, mask bits, sample offsets) either in memory or in a memory-mapped file. Plain
// C++: no tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "eagle/data/categories.h"

namespace eagle::data {

using TokenId = std::uint32_t;

struct Sample {
  std::vector<TokenId> input_ids;
  std::vector<std::uint8_t> loss_mask;  // 1: the head is trained to predict this token
  std::string category{};               // the sample's `category` field; "": none
};

// Counts per token id, bounded by what was seen: ids below kDenseIds in a flat array that grows to
// the largest id seen (at most 2 MiB), the rest in a sparse map, so one huge id costs nothing.
class TokenCounts {
 public:
  static constexpr TokenId kDenseIds = TokenId{1} << 18;
  using Entry = std::pair<TokenId, std::uint64_t>;

  TokenCounts() = default;
  // From (id, count) pairs (any order; repeated ids add up).
  explicit TokenCounts(const std::vector<Entry>& entries);
  void add(TokenId id, std::uint64_t n = 1) {
    if (id < kDenseIds) {
      if (dense_.size() <= id) dense_.resize(std::size_t{id} + 1, 0);
      dense_[id] += n;
    } else {
      sparse_[id] += n;
    }
  }
  std::uint64_t count(TokenId id) const;
  // (id, count) with count > 0, by increasing id.
  std::vector<Entry> entries() const;
  bool operator==(const TokenCounts& other) const { return entries() == other.entries(); }

 private:
  std::vector<std::uint64_t> dense_;
  std::map<TokenId, std::uint64_t> sparse_;
};

// Statistics over the samples kept (see docs/data.md).
struct TokenStats {
  TokenCounts trained_token_counts;                 // trained (loss-masked) occurrences per token id
  std::vector<std::uint64_t> length_histogram;      // index = length bucket (see data.md)
  std::uint64_t samples = 0, tokens = 0, trained_tokens = 0;
  std::uint64_t truncated = 0, dropped = 0, skipped = 0;
  TokenId max_token_id = 0;   // largest id of any kept token, trained or not (0 when empty)
  std::int64_t max_length = 0;  // longest kept sample, tokens
};

// Flat storage; `owner` keeps the memory (vectors or a mapping) alive.
struct DatasetStorage {
  std::shared_ptr<const void> owner;
  const void* tokens = nullptr;        // token_bytes per token, all samples back to back
  int token_bytes = 4;                 // 2 (uint16) or 4 (uint32)
  const std::uint8_t* mask_bits = nullptr;  // bit i (LSB first) = loss mask of token i
  const std::uint64_t* offsets = nullptr;   // size()+1 entries, token index of each sample start
  std::size_t num_samples = 0;
  std::shared_ptr<const SampleCategories> categories;  // one per sample; null: no sample has a category
};

class Dataset {
 public:
  Dataset() = default;
  // `stats` must describe `storage`; when its sample or token count does not match (e.g. default
  // stats), they are computed from the storage (one pass).
  Dataset(DatasetStorage storage, TokenStats stats, std::string source);
  // In-memory dataset (tests, on-the-fly JSONL). Stats are computed from the samples.
  static Dataset from_samples(const std::vector<Sample>& samples, std::string source = "<memory>");

  std::size_t size() const { return storage_.num_samples; }
  std::int64_t length(std::size_t i) const {
    return static_cast<std::int64_t>(storage_.offsets[i + 1] - storage_.offsets[i]);
  }
  std::vector<std::int64_t> lengths() const;
  std::uint64_t total_tokens() const { return size() ? storage_.offsets[size()] : 0; }
  TokenId token(std::size_t sample, std::int64_t pos) const;
  bool trained(std::size_t sample, std::int64_t pos) const;
  // Copies sample i into ids/mask (at most max_len tokens); returns the tokens copied.
  std::int64_t copy_sample(std::size_t i, std::int32_t* ids, std::uint8_t* mask, std::int64_t max_len) const;
  Sample sample(std::size_t i) const;
  // A dataset of the given samples of this one (for splits), in memory.
  Dataset subset(const std::vector<std::size_t>& indices) const;
  TokenId max_token_id() const { return stats_.max_token_id; }  // O(1): kept in the stats
  // Sample i's category ("" when it has none); whether any sample has one.
  const std::string& category(std::size_t i) const;
  bool has_categories() const { return storage_.categories != nullptr; }

  const TokenStats& stats() const { return stats_; }
  const std::string& source() const { return source_; }
  const DatasetStorage& storage() const { return storage_; }

 private:
  DatasetStorage storage_;
  TokenStats stats_;
  std::string source_;
};

// Computes TokenStats of samples (truncated/dropped/skipped counts left at 0).
TokenStats compute_stats(const std::vector<Sample>& samples);
// The same over flat storage: all samples, or the samples at `indices`.
TokenStats compute_stats(const DatasetStorage& storage);
TokenStats compute_stats(const DatasetStorage& storage, const std::vector<std::size_t>& indices);
// The first position a draft head trains: it predicts the token at p from the tokens before p - 1
// (train::count_loss_positions, head::in_document_mask), so a trained token at 0 or 1 trains nothing.
inline constexpr std::int64_t kFirstTrainablePosition = 2;
// Whether some sample has a trained token at kFirstTrainablePosition or later (stops at the first).
bool has_trainable_position(const Dataset& ds);
// The length-histogram bucket of a sample length (powers of two: bucket b holds [2^b, 2^(b+1))).
std::size_t length_bucket(std::int64_t length);

}  // namespace eagle::data
