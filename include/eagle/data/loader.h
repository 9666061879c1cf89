// Loading training data for the trainer and data-stats: a prepared dataset folder (memory-mapped,
// with its stored validation split) or JSON sample files parsed on the fly into the same layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/data/read_options.h"

namespace eagle::data {

// The files of a prepared dataset folder (docs/data.md).
inline constexpr const char* kTrainFile = "train.bin";
inline constexpr const char* kValidationFile = "validation.bin";
inline constexpr const char* kStatsFile = "stats.json";

struct LoadOptions {
  std::int64_t training_seq_len;
  config::BadSamplePolicy bad_sample_policy;
  config::OverlongPolicy overlong_policy;
  double validation_fraction = 0;  // JSON input, or a prepared folder without a stored split
  std::uint64_t seed = 42;
  std::int64_t vocab_size = 0;     // the target's vocabulary: every id must be below it; 0: unchecked
  bool allow_untrained = false;  // JSON input: keep samples without a trained token
  std::vector<MediaToken> media_tokens{};  // the target's media placeholders: refused in every sample

  // The loading options of a run (validation_fraction included; callers that want no split set it
  // to 0 on the copy).
  static LoadOptions from(const config::Options& o);
};

struct LoadedData {
  Dataset train;
  std::optional<Dataset> validation;
};

// Every token id of the dataset below vocab_size and none a media placeholder: Error(input) naming
// the file, the sample and the position of the first that is not, and which placeholder (cheap when
// the stored max_token_id is below vocab_size and every placeholder).
void check_token_ids(const Dataset& dataset, std::int64_t vocab_size, const std::vector<MediaToken>& media_tokens = {});

// True when path is a folder written by eagle-train prepare (it holds train.bin).
bool is_prepared_dataset(const std::string& path);

// path: a prepared dataset folder (its validation split is used when present), a single prepared
// .bin file, a .jsonl/.json(.gz) file, or a folder of such files. Samples longer than
// training_seq_len are truncated or dropped (a prepared dataset written with a larger limit is
// then copied into memory); ids at or above vocab_size and media_tokens are refused (JSON: by file
// and line; prepared data: by file, sample and position).
// Throws eagle::Error (ErrorKind::input) naming file, place and field.
LoadedData load_dataset(const std::string& path, const LoadOptions& opts);

}  // namespace eagle::data
