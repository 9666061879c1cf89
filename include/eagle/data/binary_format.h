// The prepared dataset file (docs/data.md, "Binary layout"): a versioned header, then the token
// array, the loss-mask bits, the sample offsets and the statistics, each 64-byte aligned. Opening
// maps the file (O(1) in its size, no copy) after checking the header against the file size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eagle/data/dataset.h"

namespace eagle::data {

inline constexpr char kDatasetMagic[8] = {'E', 'A', 'G', 'L', 'E', 'D', 'S', '1'};
// 3: the samples' categories; 2: sparse trained-token counts; 1 and 2 are still read.
inline constexpr std::uint32_t kDatasetVersion = 3;
inline constexpr std::uint64_t kSectionAlign = 64;

// Little-endian, 256 bytes; every offset is from the start of the file.
struct DatasetHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;     // 256
  std::uint32_t token_bytes;      // 2 (uint16) or 4 (uint32), chosen by max_token_id
  std::uint32_t max_token_id;
  std::uint64_t num_samples;
  std::uint64_t num_tokens;
  std::uint64_t max_length;       // longest sample, tokens
  std::uint64_t training_seq_len; // the limit applied when the file was written
  std::uint64_t tokens_offset;    // num_tokens * token_bytes
  std::uint64_t mask_offset;      // ceil(num_tokens / 8) bytes, bit k (LSB first) = mask of token k
  std::uint64_t offsets_offset;   // (num_samples + 1) uint64
  std::uint64_t histogram_offset; // histogram_entries uint64 (length buckets)
  std::uint64_t counts_offset;    // counts_entries (id, count) uint64 pairs, by id (version 1: a count per id)
  std::uint64_t histogram_entries;
  std::uint64_t counts_entries;
  std::uint64_t trained_tokens;
  std::uint64_t truncated, dropped, skipped;
  std::uint64_t file_bytes;       // the whole file
  std::uint64_t checksum;         // FNV-1a 64 of the header with this field zero
  std::uint64_t categories_offset;  // categories_bytes: the samples' categories (version 3; 0: none)
  std::uint64_t categories_bytes;
  std::uint64_t category_names;   // names in the section, "" (no category) first; 0: no section
  std::uint8_t reserved[256 - 184];
};
static_assert(sizeof(DatasetHeader) == 256);

// Writes the samples of src at `indices` (in that order, with their categories when src has any) to
// path; the statistics are computed from them, with truncated/dropped/skipped taken from `counts`.
// Returns the statistics written.
TokenStats write_dataset_file(const std::string& path, const Dataset& src, const std::vector<std::size_t>& indices,
                              const TokenStats& counts, std::int64_t training_seq_len);

// Maps a dataset file; throws ErrorKind::input naming the file for a truncated, foreign or
// inconsistent one. The body is checked against the header once (token ids <= max_token_id, the
// trained-token count), naming the sample and position of the first id that is not.
Dataset open_dataset_file(const std::string& path);
// Reads and checks only the header.
DatasetHeader read_dataset_header(const std::string& path);

}  // namespace eagle::data
