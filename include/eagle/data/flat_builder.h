// Growable flat dataset storage (tokens, loss-mask bits, offsets) filled sample by sample; it turns
// into a Dataset without a copy. Used by the JSON readers and by in-memory splits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eagle/data/dataset.h"

namespace eagle::data {

// Anonymous memory grown with mremap: growing moves pages instead of copying them, so a buffer of
// N bytes never needs 2N bytes on the way (as std::vector's reallocation does).
class GrowBuffer {
 public:
  GrowBuffer() = default;
  ~GrowBuffer();
  GrowBuffer(GrowBuffer&& o) noexcept;
  GrowBuffer& operator=(GrowBuffer&& o) noexcept;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;

  // New bytes are zero. Grows the capacity geometrically.
  void resize(std::size_t bytes);
  void clear() { size_ = 0; }
  void release();
  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

class FlatBuilder {
 public:
  FlatBuilder();
  // Appends one sample: n ids, their 0/1 loss mask and its category ("": none).
  void add(const TokenId* ids, const std::uint8_t* mask, std::size_t n, std::string_view category = {});
  std::size_t size() const { return num_samples_; }
  std::uint64_t total_tokens() const { return num_tokens_; }
  // Storage viewing the builder's buffers (owner left empty: valid while the builder lives).
  DatasetStorage view() const;
  // Hands the buffers to a Dataset (the builder is left empty). `counts` supplies the
  // truncated/dropped/skipped counts; the rest of the statistics is computed here.
  Dataset finish(std::string source, const TokenStats& counts);

 private:
  void widen_tokens();  // uint16 -> uint32, on the first id above 65535
  GrowBuffer tokens_, mask_, offsets_;
  std::shared_ptr<SampleCategories> categories_;  // made at the first sample with a category
  int token_bytes_ = 2;
  std::size_t num_samples_ = 0;
  std::uint64_t num_tokens_ = 0;
};

// Copies the given samples of `src` (in the given order, with their categories) into a new in-memory Dataset.
// `counts` supplies the truncated/dropped/skipped counts of the result.
Dataset copy_samples(const Dataset& src, const std::vector<std::size_t>& indices, std::string source,
                     const TokenStats& counts = {});

// The seeded validation split of n samples: round(fraction * n) indices (at least 1 when
// fraction > 0 and n >= 2, and never all), increasing. Platform-independent (splitmix64 keys).
std::vector<std::size_t> validation_indices(std::size_t n, double fraction, std::uint64_t seed);
// The indices of 0..n-1 not in `excluded` (increasing).
std::vector<std::size_t> complement_indices(std::size_t n, const std::vector<std::size_t>& excluded);

// n samples split into the validation split (validation_indices) and the rest, both increasing.
struct SplitIndices {
  std::vector<std::size_t> train, validation;
};
SplitIndices split_validation(std::size_t n, double fraction, std::uint64_t seed);

// The samples of `all` split by split_validation: the rest, named `source`, keeps all's counts
// (truncated, dropped, skipped); the validation split is named `source` + " (validation split)".
// When nothing is held out (fraction 0, fewer than two samples) there is no validation split and
// the rest is `all` itself, uncopied.
struct SplitDataset {
  Dataset train;
  std::optional<Dataset> validation;
  SplitIndices indices;  // where each sample came from in `all`
};
SplitDataset split_dataset(Dataset all, double fraction, std::uint64_t seed, const std::string& source);

}  // namespace eagle::data
