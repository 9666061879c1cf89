// Dataset over flat storage: in-memory construction, access, subsets.
#include "eagle/data/dataset.h"

#include <algorithm>
#include <bit>

namespace eagle::data {
namespace {

struct MemoryStorage {
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint8_t> mask_bits;
  std::vector<std::uint64_t> offsets;
};

}  // namespace

std::size_t length_bucket(std::int64_t length) {
  if (length <= 1) return 0;
  return static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(length)) - 1);
}

TokenStats compute_stats(const std::vector<Sample>& samples) {
  TokenStats s;
  for (const auto& sm : samples) {
    ++s.samples;
    s.tokens += sm.input_ids.size();
    std::size_t b = length_bucket(static_cast<std::int64_t>(sm.input_ids.size()));
    if (s.length_histogram.size() <= b) s.length_histogram.resize(b + 1, 0);
    ++s.length_histogram[b];
    for (std::size_t i = 0; i < sm.input_ids.size(); ++i) {
      if (!sm.loss_mask[i]) continue;
      ++s.trained_tokens;
      TokenId t = sm.input_ids[i];
      if (s.trained_token_counts.size() <= t) s.trained_token_counts.resize(t + 1, 0);
      ++s.trained_token_counts[t];
    }
  }
  return s;
}

Dataset::Dataset(DatasetStorage storage, TokenStats stats, std::string source)
    : storage_(std::move(storage)), stats_(std::move(stats)), source_(std::move(source)) {}

Dataset Dataset::from_samples(const std::vector<Sample>& samples, std::string source) {
  auto mem = std::make_shared<MemoryStorage>();
  std::uint64_t total = 0;
  mem->offsets.push_back(0);
  for (const auto& s : samples) {
    total += s.input_ids.size();
    mem->offsets.push_back(total);
  }
  mem->tokens.reserve(total);
  mem->mask_bits.assign((total + 7) / 8, 0);
  std::uint64_t k = 0;
  for (const auto& s : samples) {
    for (std::size_t i = 0; i < s.input_ids.size(); ++i, ++k) {
      mem->tokens.push_back(s.input_ids[i]);
      if (s.loss_mask[i]) mem->mask_bits[k / 8] |= static_cast<std::uint8_t>(1u << (k % 8));
    }
  }
  DatasetStorage st;
  st.tokens = mem->tokens.data();
  st.token_bytes = 4;
  st.mask_bits = mem->mask_bits.data();
  st.offsets = mem->offsets.data();
  st.num_samples = samples.size();
  st.owner = mem;
  return Dataset(std::move(st), compute_stats(samples), std::move(source));
}

std::vector<std::int64_t> Dataset::lengths() const {
  std::vector<std::int64_t> out(size());
  for (std::size_t i = 0; i < size(); ++i) out[i] = length(i);
  return out;
}

TokenId Dataset::token(std::size_t sample, std::int64_t pos) const {
  std::uint64_t k = storage_.offsets[sample] + static_cast<std::uint64_t>(pos);
  if (storage_.token_bytes == 2) return static_cast<const std::uint16_t*>(storage_.tokens)[k];
  return static_cast<const std::uint32_t*>(storage_.tokens)[k];
}

bool Dataset::trained(std::size_t sample, std::int64_t pos) const {
  std::uint64_t k = storage_.offsets[sample] + static_cast<std::uint64_t>(pos);
  return (storage_.mask_bits[k / 8] >> (k % 8)) & 1u;
}

std::int64_t Dataset::copy_sample(std::size_t i, std::int32_t* ids, std::uint8_t* mask, std::int64_t max_len) const {
  std::int64_t n = std::min(length(i), max_len);
  for (std::int64_t p = 0; p < n; ++p) {
    ids[p] = static_cast<std::int32_t>(token(i, p));
    mask[p] = trained(i, p) ? 1 : 0;
  }
  return n;
}

Sample Dataset::sample(std::size_t i) const {
  Sample s;
  std::int64_t n = length(i);
  s.input_ids.resize(static_cast<std::size_t>(n));
  s.loss_mask.resize(static_cast<std::size_t>(n));
  for (std::int64_t p = 0; p < n; ++p) {
    s.input_ids[p] = token(i, p);
    s.loss_mask[p] = trained(i, p) ? 1 : 0;
  }
  return s;
}

Dataset Dataset::subset(const std::vector<std::size_t>& indices) const {
  std::vector<Sample> samples;
  samples.reserve(indices.size());
  for (std::size_t i : indices) samples.push_back(sample(i));
  return from_samples(samples, source_);
}

TokenId Dataset::max_token_id() const {
  TokenId m = 0;
  for (std::uint64_t k = 0; k < total_tokens(); ++k) {
    TokenId t = storage_.token_bytes == 2 ? static_cast<const std::uint16_t*>(storage_.tokens)[k]
                                          : static_cast<const std::uint32_t*>(storage_.tokens)[k];
    m = std::max(m, t);
  }
  return m;
}

}  // namespace eagle::data
