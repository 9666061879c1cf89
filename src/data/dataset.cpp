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

TokenCounts::TokenCounts(const std::vector<Entry>& entries) {
  for (const auto& [id, n] : entries) add(id, n);
}

std::uint64_t TokenCounts::count(TokenId id) const {
  if (id < kDenseIds) return id < dense_.size() ? dense_[id] : 0;
  auto it = sparse_.find(id);
  return it == sparse_.end() ? 0 : it->second;
}

std::vector<TokenCounts::Entry> TokenCounts::entries() const {
  std::vector<Entry> out;
  for (std::size_t id = 0; id < dense_.size(); ++id)
    if (dense_[id] > 0) out.emplace_back(static_cast<TokenId>(id), dense_[id]);
  for (const auto& [id, n] : sparse_)
    if (n > 0) out.emplace_back(id, n);
  return out;
}

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
    s.max_length = std::max(s.max_length, static_cast<std::int64_t>(sm.input_ids.size()));
    for (std::size_t i = 0; i < sm.input_ids.size(); ++i) {
      s.max_token_id = std::max(s.max_token_id, sm.input_ids[i]);
      if (!sm.loss_mask[i]) continue;
      ++s.trained_tokens;
      s.trained_token_counts.add(sm.input_ids[i]);
    }
  }
  return s;
}

namespace {

template <typename T>
void add_flat_stats(const T* tokens, const DatasetStorage& st, const std::vector<std::size_t>* indices, TokenStats& s) {
  std::uint32_t max_id = 0;
  std::size_t n = indices ? indices->size() : st.num_samples;
  for (std::size_t j = 0; j < n; ++j) {
    std::size_t i = indices ? (*indices)[j] : j;
    std::uint64_t begin = st.offsets[i], end = st.offsets[i + 1];
    auto len = static_cast<std::int64_t>(end - begin);
    ++s.samples;
    s.tokens += end - begin;
    s.max_length = std::max(s.max_length, len);
    std::size_t b = length_bucket(len);
    if (s.length_histogram.size() <= b) s.length_histogram.resize(b + 1, 0);
    ++s.length_histogram[b];
    for (std::uint64_t k = begin; k < end; ++k) {
      std::uint32_t t = tokens[k];
      max_id = std::max(max_id, t);
      if (!((st.mask_bits[k / 8] >> (k % 8)) & 1u)) continue;
      ++s.trained_tokens;
      s.trained_token_counts.add(t);
    }
  }
  s.max_token_id = max_id;
}

TokenStats compute_stats_of(const DatasetStorage& storage, const std::vector<std::size_t>* indices) {
  TokenStats s;
  if (storage.token_bytes == 2)
    add_flat_stats(static_cast<const std::uint16_t*>(storage.tokens), storage, indices, s);
  else
    add_flat_stats(static_cast<const std::uint32_t*>(storage.tokens), storage, indices, s);
  return s;
}

}  // namespace

TokenStats compute_stats(const DatasetStorage& storage) { return compute_stats_of(storage, nullptr); }
TokenStats compute_stats(const DatasetStorage& storage, const std::vector<std::size_t>& indices) {
  return compute_stats_of(storage, &indices);
}

Dataset::Dataset(DatasetStorage storage, TokenStats stats, std::string source)
    : storage_(std::move(storage)), stats_(std::move(stats)), source_(std::move(source)) {
  if (stats_.samples != size() || stats_.tokens != total_tokens()) {
    TokenStats computed = compute_stats(storage_);
    computed.truncated = stats_.truncated;
    computed.dropped = stats_.dropped;
    computed.skipped = stats_.skipped;
    stats_ = std::move(computed);
  }
}

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
  SampleCategories categories;
  for (const auto& s : samples) categories.add(s.category);
  if (categories.any()) st.categories = std::make_shared<const SampleCategories>(std::move(categories));
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

bool has_trainable_position(const Dataset& ds) {
  for (std::size_t i = 0; i < ds.size(); ++i)
    for (std::int64_t p = kFirstTrainablePosition; p < ds.length(i); ++p)
      if (ds.trained(i, p)) return true;
  return false;
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

const std::string& Dataset::category(std::size_t i) const {
  static const std::string none;
  return storage_.categories ? storage_.categories->of(i) : none;
}

Sample Dataset::sample(std::size_t i) const {
  Sample s;
  s.category = category(i);
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

}  // namespace eagle::data
