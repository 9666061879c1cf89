// Growable flat storage (mremap-backed buffers), in-memory copies and the seeded validation split.
#include "eagle/data/flat_builder.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>

#include "eagle/util/error.h"

namespace eagle::data {

GrowBuffer::~GrowBuffer() { release(); }

GrowBuffer::GrowBuffer(GrowBuffer&& o) noexcept : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
  o.data_ = nullptr;
  o.size_ = o.capacity_ = 0;
}

GrowBuffer& GrowBuffer::operator=(GrowBuffer&& o) noexcept {
  if (this != &o) {
    release();
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  return *this;
}

void GrowBuffer::release() {
  if (data_) munmap(data_, capacity_);
  data_ = nullptr;
  size_ = capacity_ = 0;
}

void GrowBuffer::resize(std::size_t bytes) {
  if (bytes > capacity_) {
    std::size_t cap = std::max<std::size_t>({bytes, capacity_ + capacity_ / 2, 1 << 16});
    cap = (cap + 4095) & ~std::size_t{4095};
    void* p = data_ ? mremap(data_, capacity_, cap, MREMAP_MAYMOVE)
                    : mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::uint8_t*>(p);
    capacity_ = cap;
  }
  // Fresh anonymous pages are zero; bytes once used and then cut off by clear() are not.
  if (bytes > size_) std::memset(data_ + size_, 0, std::min(bytes, capacity_) - size_);
  size_ = bytes;
}

FlatBuilder::FlatBuilder() {
  offsets_.resize(sizeof(std::uint64_t));  // offsets[0] = 0
}

void FlatBuilder::widen_tokens() {
  GrowBuffer wide;
  wide.resize(num_tokens_ * 4);
  const auto* src = reinterpret_cast<const std::uint16_t*>(tokens_.data());
  auto* dst = reinterpret_cast<std::uint32_t*>(wide.data());
  for (std::uint64_t k = 0; k < num_tokens_; ++k) dst[k] = src[k];
  tokens_ = std::move(wide);
  token_bytes_ = 4;
}

void FlatBuilder::add(const TokenId* ids, const std::uint8_t* mask, std::size_t n, std::string_view category) {
  if (!category.empty() && !categories_) {
    categories_ = std::make_shared<SampleCategories>();
    for (std::size_t i = 0; i < num_samples_; ++i) categories_->add("");
  }
  if (categories_) categories_->add(category);
  if (token_bytes_ == 2) {
    TokenId max_id = 0;
    for (std::size_t i = 0; i < n; ++i) max_id = std::max(max_id, ids[i]);
    if (max_id > 0xFFFF) widen_tokens();
  }
  std::uint64_t k0 = num_tokens_;
  tokens_.resize((k0 + n) * token_bytes_);
  if (token_bytes_ == 2) {
    auto* dst = reinterpret_cast<std::uint16_t*>(tokens_.data()) + k0;
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint16_t>(ids[i]);
  } else {
    std::memcpy(reinterpret_cast<std::uint32_t*>(tokens_.data()) + k0, ids, n * 4);
  }
  mask_.resize((k0 + n + 7) / 8);
  std::uint8_t* bits = mask_.data();
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t k = k0 + i;
    bits[k / 8] |= static_cast<std::uint8_t>((mask[i] & 1u) << (k % 8));
  }
  num_tokens_ += n;
  ++num_samples_;
  offsets_.resize((num_samples_ + 1) * sizeof(std::uint64_t));
  reinterpret_cast<std::uint64_t*>(offsets_.data())[num_samples_] = num_tokens_;
}

DatasetStorage FlatBuilder::view() const {
  DatasetStorage st;
  st.tokens = tokens_.data();
  st.token_bytes = token_bytes_;
  st.mask_bits = mask_.data();
  st.offsets = reinterpret_cast<const std::uint64_t*>(offsets_.data());
  st.num_samples = num_samples_;
  st.categories = categories_;
  return st;
}

Dataset FlatBuilder::finish(std::string source, const TokenStats& counts) {
  struct Buffers {
    GrowBuffer tokens, mask, offsets;
  };
  DatasetStorage st = view();
  TokenStats stats = compute_stats(st);
  stats.truncated = counts.truncated;
  stats.dropped = counts.dropped;
  stats.skipped = counts.skipped;
  auto owner = std::make_shared<Buffers>(Buffers{std::move(tokens_), std::move(mask_), std::move(offsets_)});
  st.owner = owner;
  *this = FlatBuilder();
  return Dataset(std::move(st), std::move(stats), std::move(source));
}

Dataset copy_samples(const Dataset& src, const std::vector<std::size_t>& indices, std::string source,
                     const TokenStats& counts) {
  FlatBuilder b;
  std::vector<TokenId> ids;
  std::vector<std::uint8_t> mask;
  for (std::size_t i : indices) {
    auto n = static_cast<std::size_t>(src.length(i));
    ids.resize(n);
    mask.resize(n);
    for (std::size_t p = 0; p < n; ++p) {
      ids[p] = src.token(i, static_cast<std::int64_t>(p));
      mask[p] = src.trained(i, static_cast<std::int64_t>(p)) ? 1 : 0;
    }
    b.add(ids.data(), mask.data(), n, src.category(i));
  }
  return b.finish(std::move(source), counts);
}

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<std::size_t> validation_indices(std::size_t n, double fraction, std::uint64_t seed) {
  if (fraction <= 0 || n < 2) return {};
  auto k = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(n)));
  k = std::clamp<std::size_t>(k, 1, n - 1);
  // Each index gets a seeded pseudo-random key; the k smallest keys form the split.
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed(n);
  std::uint64_t s = splitmix64(seed);
  for (std::size_t i = 0; i < n; ++i) keyed[i] = {splitmix64(s ^ splitmix64(i)), i};
  std::nth_element(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(k), keyed.end());
  std::vector<std::size_t> out(k);
  for (std::size_t j = 0; j < k; ++j) out[j] = keyed[j].second;
  std::sort(out.begin(), out.end());
  return out;
}

SplitIndices split_validation(std::size_t n, double fraction, std::uint64_t seed) {
  SplitIndices s;
  s.validation = validation_indices(n, fraction, seed);
  s.train = complement_indices(n, s.validation);
  return s;
}

SplitDataset split_dataset(Dataset all, double fraction, std::uint64_t seed, const std::string& source) {
  SplitDataset out{Dataset(), std::nullopt, split_validation(all.size(), fraction, seed)};
  if (out.indices.validation.empty()) {  // nothing held out: the samples as they are, no copy
    out.train = std::move(all);
    return out;
  }
  out.train = copy_samples(all, out.indices.train, source, all.stats());
  out.validation = copy_samples(all, out.indices.validation, source + " (validation split)");
  return out;
}

std::vector<std::size_t> complement_indices(std::size_t n, const std::vector<std::size_t>& excluded) {
  std::vector<std::size_t> out;
  out.reserve(n - std::min(n, excluded.size()));
  std::size_t j = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (j < excluded.size() && excluded[j] == i) {
      ++j;
      continue;
    }
    out.push_back(i);
  }
  return out;
}

}  // namespace eagle::data
