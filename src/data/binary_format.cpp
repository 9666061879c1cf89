// Writing and memory-mapping prepared dataset files (layout in binary_format.h and docs/data.md).
#include "eagle/util/fs_sync.h"
#include "eagle/data/binary_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>

#include "eagle/util/error.h"
#include "eagle/util/hash.h"
#include "eagle/util/mapped_file.h"

namespace eagle::data {
namespace {

static_assert(std::endian::native == std::endian::little, "the dataset format is little-endian");

std::uint64_t align_up(std::uint64_t x) { return (x + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

std::uint64_t header_checksum(DatasetHeader h) {
  h.checksum = 0;
  return util::fnv1a(&h, sizeof h);
}

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) throw fail("cannot create the file");
    std::setvbuf(f_, nullptr, _IOFBF, 4u << 20);
  }
  ~Writer() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, std::size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) throw fail("cannot write the file");
    pos_ += n;
  }
  void pad() {
    static const char zeros[kSectionAlign] = {};
    write(zeros, align_up(pos_) - pos_);
  }
  std::uint64_t pos() const { return pos_; }
  void rewrite_start(const void* p, std::size_t n) {
    if (std::fseek(f_, 0, SEEK_SET) != 0) throw fail("cannot write the file");
    write(p, n);
  }
  void close() {
    bool ok = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
    ok = std::fclose(f_) == 0 && ok;
    f_ = nullptr;
    if (!ok) throw fail("cannot write the file");
  }

 private:
  Error fail(const char* what) const {
    return Error(ErrorKind::output, what).file(path_).found(std::strerror(errno));
  }
  std::string path_;
  std::FILE* f_;
  std::uint64_t pos_ = 0;
};

// Token ids of the selected samples, converted to the output width.
template <typename Out>
void write_tokens(Writer& w, const Dataset& src, const std::vector<std::size_t>& indices) {
  const DatasetStorage& st = src.storage();
  std::vector<Out> buf;
  for (std::size_t i : indices) {
    std::uint64_t b = st.offsets[i], e = st.offsets[i + 1];
    if (st.token_bytes == static_cast<int>(sizeof(Out))) {
      w.write(static_cast<const Out*>(st.tokens) + b, (e - b) * sizeof(Out));
      continue;
    }
    buf.resize(e - b);
    for (std::uint64_t k = b; k < e; ++k) {
      buf[k - b] = st.token_bytes == 2 ? static_cast<Out>(static_cast<const std::uint16_t*>(st.tokens)[k])
                                       : static_cast<Out>(static_cast<const std::uint32_t*>(st.tokens)[k]);
    }
    w.write(buf.data(), buf.size() * sizeof(Out));
  }
}

void write_mask(Writer& w, const Dataset& src, const std::vector<std::size_t>& indices) {
  const DatasetStorage& st = src.storage();
  bool identity = indices.size() == src.size();
  for (std::size_t j = 0; identity && j < indices.size(); ++j) identity = indices[j] == j;
  if (identity) {
    w.write(st.mask_bits, (src.total_tokens() + 7) / 8);
    return;
  }
  std::vector<std::uint8_t> out;
  std::uint8_t cur = 0;
  unsigned nbits = 0;
  for (std::size_t i : indices) {
    for (std::uint64_t k = st.offsets[i]; k < st.offsets[i + 1]; ++k) {
      cur |= static_cast<std::uint8_t>(((st.mask_bits[k / 8] >> (k % 8)) & 1u) << nbits);
      if (++nbits == 8) {
        out.push_back(cur);
        cur = 0;
        nbits = 0;
        if (out.size() == (1u << 20)) {
          w.write(out.data(), out.size());
          out.clear();
        }
      }
    }
  }
  if (nbits) out.push_back(cur);
  w.write(out.data(), out.size());
}

Error bad_file(const std::string& path, std::string what) {
  return Error(ErrorKind::input, std::move(what)).file(path);
}

}  // namespace

TokenStats write_dataset_file(const std::string& path, const Dataset& src, const std::vector<std::size_t>& indices,
                              const TokenStats& counts, std::int64_t training_seq_len) {
  TokenStats stats = compute_stats(src.storage(), indices);
  stats.truncated = counts.truncated;
  stats.dropped = counts.dropped;
  stats.skipped = counts.skipped;

  DatasetHeader h{};
  std::memcpy(h.magic, kDatasetMagic, sizeof h.magic);
  h.version = kDatasetVersion;
  h.header_bytes = sizeof(DatasetHeader);
  h.token_bytes = stats.max_token_id > 0xFFFF ? 4 : 2;
  h.max_token_id = stats.max_token_id;
  h.num_samples = stats.samples;
  h.num_tokens = stats.tokens;
  h.max_length = static_cast<std::uint64_t>(stats.max_length);
  h.training_seq_len = static_cast<std::uint64_t>(training_seq_len);
  h.histogram_entries = stats.length_histogram.size();
  const auto count_entries = stats.trained_token_counts.entries();
  h.counts_entries = count_entries.size();
  h.trained_tokens = stats.trained_tokens;
  h.truncated = stats.truncated;
  h.dropped = stats.dropped;
  h.skipped = stats.skipped;

  Writer w(path);
  w.write(&h, sizeof h);
  w.pad();
  h.tokens_offset = w.pos();
  if (h.token_bytes == 2)
    write_tokens<std::uint16_t>(w, src, indices);
  else
    write_tokens<std::uint32_t>(w, src, indices);
  w.pad();
  h.mask_offset = w.pos();
  write_mask(w, src, indices);
  w.pad();
  h.offsets_offset = w.pos();
  std::vector<std::uint64_t> offsets;
  offsets.reserve(indices.size() + 1);
  offsets.push_back(0);
  for (std::size_t i : indices) offsets.push_back(offsets.back() + static_cast<std::uint64_t>(src.length(i)));
  w.write(offsets.data(), offsets.size() * 8);
  w.pad();
  h.histogram_offset = w.pos();
  w.write(stats.length_histogram.data(), stats.length_histogram.size() * 8);
  w.pad();
  h.counts_offset = w.pos();
  // Sparse counts: (id, count) as two uint64 per token id seen, by increasing id.
  std::vector<std::uint64_t> pairs;
  pairs.reserve(2 * count_entries.size());
  for (const auto& [id, n] : count_entries) {
    pairs.push_back(id);
    pairs.push_back(n);
  }
  w.write(pairs.data(), pairs.size() * 8);
  w.pad();
  if (const auto& categories = src.storage().categories) {
    const std::string section = categories->encode(indices);
    h.categories_offset = w.pos();
    h.categories_bytes = section.size();
    h.category_names = categories->names().size();
    w.write(section.data(), section.size());
    w.pad();
  }
  h.file_bytes = w.pos();
  h.checksum = header_checksum(h);
  w.rewrite_start(&h, sizeof h);
  w.close();
  return stats;
}

namespace {

// The body against its header, once at load (a pass over the mapping, cheap next to training):
// every token id at most max_token_id, and as many loss-mask bits set as trained_tokens. A body
// that disagrees was damaged or written by something else; ids are then never trusted further.
template <typename T>
void verify_tokens(const std::string& path, const T* tokens, const DatasetStorage& st, const DatasetHeader& h) {
  std::uint64_t trained = 0;
  for (std::size_t i = 0; i < st.num_samples; ++i) {
    for (std::uint64_t k = st.offsets[i]; k < st.offsets[i + 1]; ++k) {
      if (tokens[k] > h.max_token_id)
        throw bad_file(path, "a token id is above the header's max_token_id")
            .place("sample " + std::to_string(i) + ", position " + std::to_string(k - st.offsets[i]))
            .expected("ids <= " + std::to_string(h.max_token_id))
            .found(std::to_string(tokens[k]))
            .hint("the file is damaged; prepare it again");
      trained += (st.mask_bits[k / 8] >> (k % 8)) & 1u;
    }
  }
  if (trained != h.trained_tokens)
    throw bad_file(path, "the loss mask does not match the header")
        .place("section mask")
        .expected(std::to_string(h.trained_tokens) + " trained tokens (from the header)")
        .found(std::to_string(trained))
        .hint("the file is damaged; prepare it again");
}

void verify_body(const std::string& path, const DatasetStorage& st, const DatasetHeader& h) {
  for (std::size_t i = 0; i < st.num_samples; ++i)
    if (st.offsets[i + 1] < st.offsets[i] || st.offsets[i + 1] > h.num_tokens)
      throw bad_file(path, "dataset offsets are not increasing").place("section offsets, sample " + std::to_string(i));
  if (st.token_bytes == 2)
    verify_tokens(path, static_cast<const std::uint16_t*>(st.tokens), st, h);
  else
    verify_tokens(path, static_cast<const std::uint32_t*>(st.tokens), st, h);
}

}  // namespace

DatasetHeader read_dataset_header(const std::string& path) {
  util::require_regular_file(path, ErrorKind::input, "the dataset file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw bad_file(path, "cannot open the dataset file").found(std::strerror(errno));
  struct stat sb {};
  fstat(fd, &sb);
  DatasetHeader h{};
  ssize_t got = ::pread(fd, &h, sizeof h, 0);
  ::close(fd);
  auto size = static_cast<std::uint64_t>(sb.st_size);
  if (got < 8 || std::memcmp(h.magic, kDatasetMagic, sizeof h.magic) != 0)
    throw bad_file(path, "not an eagle-train dataset file")
                        .place("header")
                        .expected("the magic bytes EAGLEDS1")
                        .hint("create it with eagle-train prepare");
  if (got < static_cast<ssize_t>(sizeof h))
    throw bad_file(path, "dataset file is truncated")
                        .place("header")
                        .expected("256 header bytes")
                        .found(std::to_string(size) + " bytes");
  if (h.version < 1 || h.version > kDatasetVersion)
    throw bad_file(path, "unsupported dataset format version")
                        .place("header")
                        .expected("1 .. " + std::to_string(kDatasetVersion))
                        .found(std::to_string(h.version))
                        .hint("prepare the dataset again with this eagle-train");
  if (h.checksum != header_checksum(h))
    throw bad_file(path, "dataset header is corrupt").place("header").expected("a matching header checksum");
  if (h.file_bytes != size)
    throw bad_file(path, size < h.file_bytes ? "dataset file is truncated" : "dataset file has extra bytes")
                        .expected(std::to_string(h.file_bytes) + " bytes (from the header)")
                        .found(std::to_string(size) + " bytes")
                        .hint("prepare the dataset again");
  auto section = [&](const char* name, std::uint64_t offset, std::uint64_t bytes) {
    if (offset % kSectionAlign != 0 || offset < sizeof h || offset > size || bytes > size - offset)
      throw bad_file(path, "dataset section lies outside the file")
                          .place(std::string("section ") + name)
                          .expected("an aligned range within " + std::to_string(size) + " bytes")
                          .found("offset " + std::to_string(offset) + ", " + std::to_string(bytes) + " bytes");
  };
  if (h.header_bytes != sizeof h || (h.token_bytes != 2 && h.token_bytes != 4) || h.num_samples > size ||
      h.num_tokens > size || h.histogram_entries > size || h.counts_entries > size || h.max_length > h.num_tokens ||
      h.trained_tokens > h.num_tokens)
    throw bad_file(path, "dataset header holds impossible values").place("header");
  section("tokens", h.tokens_offset, h.num_tokens * h.token_bytes);
  section("mask", h.mask_offset, (h.num_tokens + 7) / 8);
  section("offsets", h.offsets_offset, (h.num_samples + 1) * 8);
  section("histogram", h.histogram_offset, h.histogram_entries * 8);
  // Version 1 stored a dense count per id, version 2 (id, count) pairs.
  section("counts", h.counts_offset, h.counts_entries * (h.version == 1 ? 8 : 16));
  if (h.category_names == 0) {
    if (h.categories_offset != 0 || h.categories_bytes != 0)
      throw bad_file(path, "dataset header holds impossible values").place("header, categories");
  } else {
    if (h.version < 3 || h.category_names > size || h.categories_bytes > size)
      throw bad_file(path, "dataset header holds impossible values").place("header, categories");
    section("categories", h.categories_offset, h.categories_bytes);
  }
  return h;
}

Dataset open_dataset_file(const std::string& path) {
  DatasetHeader h = read_dataset_header(path);
  auto map = std::make_shared<const util::MappedFile>(path, "the dataset file");
  // The header was checked against the size of the file as it was then.
  if (map->size() != h.file_bytes)
    throw bad_file(path, "dataset file changed while it was opened")
        .expected(std::to_string(h.file_bytes) + " bytes (from the header)")
        .found(std::to_string(map->size()) + " bytes");
  std::shared_ptr<const void> owner = map;
  const auto* bytes = map->data();

  DatasetStorage st;
  st.owner = owner;
  st.tokens = bytes + h.tokens_offset;
  st.token_bytes = static_cast<int>(h.token_bytes);
  st.mask_bits = bytes + h.mask_offset;
  st.offsets = reinterpret_cast<const std::uint64_t*>(bytes + h.offsets_offset);
  st.num_samples = h.num_samples;
  if (st.offsets[0] != 0 || st.offsets[h.num_samples] != h.num_tokens)
    throw bad_file(path, "dataset offsets do not match the token count")
                        .place("section offsets")
                        .expected("0 .. " + std::to_string(h.num_tokens))
                        .found(std::to_string(st.offsets[0]) + " .. " + std::to_string(st.offsets[h.num_samples]));

  TokenStats stats;
  const auto* hist = reinterpret_cast<const std::uint64_t*>(bytes + h.histogram_offset);
  const auto* counts = reinterpret_cast<const std::uint64_t*>(bytes + h.counts_offset);
  stats.length_histogram.assign(hist, hist + h.histogram_entries);
  if (h.version == 1) {
    for (std::uint64_t id = 0; id < h.counts_entries; ++id)
      if (counts[id] > 0) stats.trained_token_counts.add(static_cast<TokenId>(id), counts[id]);
  } else {
    for (std::uint64_t e = 0; e < h.counts_entries; ++e) {
      if (counts[2 * e] > h.max_token_id)
        throw bad_file(path, "a trained-token count names an id above the header's max_token_id")
            .place("section counts, entry " + std::to_string(e))
            .expected("ids <= " + std::to_string(h.max_token_id))
            .found(std::to_string(counts[2 * e]));
      stats.trained_token_counts.add(static_cast<TokenId>(counts[2 * e]), counts[2 * e + 1]);
    }
  }
  verify_body(path, st, h);
  if (h.category_names > 0) {
    auto categories = SampleCategories::decode(bytes + h.categories_offset, h.categories_bytes, h.category_names,
                                               h.num_samples, path);
    if (categories.any()) st.categories = std::make_shared<const SampleCategories>(std::move(categories));
  }
  stats.samples = h.num_samples;
  stats.tokens = h.num_tokens;
  stats.trained_tokens = h.trained_tokens;
  stats.truncated = h.truncated;
  stats.dropped = h.dropped;
  stats.skipped = h.skipped;
  stats.max_token_id = h.max_token_id;
  stats.max_length = static_cast<std::int64_t>(h.max_length);
  return Dataset(std::move(st), std::move(stats), path);
}

}  // namespace eagle::data
